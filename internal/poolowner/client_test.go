package poolowner

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/filevol/filevol/internal/inuse"
)

// A node's client is read back as noted, replaced when the node notes
// another, and none for a node that noted nothing; an unreadable one is
// an error naming its file, never "none".
func TestNoteClientAndClientOf(t *testing.T) {
	dir := t.TempDir()
	if err := Announce(dir, "node-a"); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := ClientOf(dir, "node-a"); ok || err != nil {
		t.Fatalf("before any note: found %v, %v", ok, err)
	}
	c := inuse.Client{Kind: "cephfs", ID: 4127, Cluster: "d034fad0-ebd3-4b1c-b9b7-4e42fe4397f3"}
	for _, want := range []inuse.Client{c, c, {Kind: c.Kind, ID: 4301, Cluster: c.Cluster}} {
		if err := NoteClient(dir, "node-a", want); err != nil {
			t.Fatal(err)
		}
		if got, ok, err := ClientOf(dir, "node-a"); !ok || err != nil || got != want {
			t.Fatalf("ClientOf = %+v, %v, %v; want %+v", got, ok, err, want)
		}
	}
	if _, ok, err := ClientOf(dir, "node-b"); ok || err != nil {
		t.Fatalf("a node never announced: found %v, %v", ok, err)
	}
	left, _ := filepath.Glob(filepath.Join(Dir(dir, Key("node-a")), "*"))
	if len(left) != 2 {
		t.Errorf("files in node-a's directory: %v, want its name and its client", left)
	}
	path := filepath.Join(Dir(dir, Key("node-a")), clientFile)
	if err := os.WriteFile(path, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := ClientOf(dir, "node-a"); ok || err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("an unreadable client: found %v, %v; want an error naming %s", ok, err, path)
	}
}
