package inuse

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const (
	vol1 = "fv1-img-3f9a0c2e-00000000000000000000000000000001"
	vol2 = "fv1-img-3f9a0c2e-00000000000000000000000000000002"
)

func TestPutOfRemove(t *testing.T) {
	dir := t.TempDir()
	s := New(dir)
	// Two processes sharing the pool: no memory in common.
	other := New(dir)
	long := strings.Repeat("n", 253) // the longest node name Kubernetes allows
	for _, e := range []Entry{
		{VolumeID: vol1, Node: "b", StagingPath: "/s/b"},
		{VolumeID: vol1, Node: long, StagingPath: "/s/long", Block: true},
		{VolumeID: vol2, Node: "b", StagingPath: "/s/b2", ReadOnly: true},
	} {
		if err := s.Put(e); err != nil {
			t.Fatal(err)
		}
	}
	got, err := other.Of(vol1)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Node != "b" || got[1].Node != long || !got[1].Block || got[0].Since.IsZero() {
		t.Fatalf("Of(vol1) = %+v", got)
	}
	byNode, err := other.OfNode("b")
	if err != nil || len(byNode) != 2 || len(byNode[vol2]) != 1 || !byNode[vol2][0].ReadOnly {
		t.Fatalf("OfNode(b) = %+v, %v", byNode, err)
	}
	// Put again replaces, never adds.
	if err := s.Put(Entry{VolumeID: vol1, Node: "b", StagingPath: "/s/b-again"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := other.Of(vol1); len(got) != 2 || got[0].StagingPath != "/s/b-again" {
		t.Fatalf("after a second Put: %+v", got)
	}
	for _, n := range []string{"b", long, "never-there"} {
		if err := other.Remove(vol1, n); err != nil {
			t.Fatalf("Remove(%s): %v", n, err)
		}
	}
	if got, _ := s.Of(vol1); len(got) != 0 {
		t.Fatalf("after Remove: %+v", got)
	}
	all, _ := s.All()
	if len(all) != 1 || len(all[vol2]) != 1 {
		t.Fatalf("All = %+v", all)
	}
}

// A record the controller cannot read must not pass for "not in use".
func TestUnreadableRecordIsAnError(t *testing.T) {
	dir := t.TempDir()
	s := New(dir)
	if err := os.MkdirAll(filepath.Join(dir, DirName), 0o700); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, DirName, vol1+sep+NodeKey("n")+suffix)
	if err := os.WriteFile(bad, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Of(vol1); err == nil || !strings.Contains(err.Error(), "unreadable") {
		t.Fatalf("Of with a torn record = %v, want an error that says so", err)
	}
}

func TestCleanTempOnlyOwn(t *testing.T) {
	dir := t.TempDir()
	s := New(dir)
	if err := os.MkdirAll(filepath.Join(dir, DirName), 0o700); err != nil {
		t.Fatal(err)
	}
	mine := filepath.Join(dir, DirName, tmpPrefix+NodeKey("me")+".x")
	theirs := filepath.Join(dir, DirName, tmpPrefix+NodeKey("them")+".x")
	for _, p := range []string{mine, theirs} {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s.CleanTemp("me")
	if _, err := os.Stat(mine); !os.IsNotExist(err) {
		t.Error("own temporary file left")
	}
	if _, err := os.Stat(theirs); err != nil {
		t.Error("another node's temporary file removed")
	}
}

// A record carries the node's device and a pending detach of it; an older
// node's record, without them, reads as before, and Get reads one record.
func TestDeviceAndPendingDetach(t *testing.T) {
	dir := t.TempDir()
	s := New(dir)
	if err := os.MkdirAll(filepath.Join(dir, DirName), 0o700); err != nil {
		t.Fatal(err)
	}
	older := `{"version":1,"volumeID":"` + vol1 + `","node":"old","stagingPath":"/s/old","since":"2026-01-02T03:04:05Z"}`
	if err := os.WriteFile(filepath.Join(dir, DirName, vol1+sep+NodeKey("old")+suffix), []byte(older), 0o600); err != nil {
		t.Fatal(err)
	}
	seen := time.Date(2026, 1, 2, 4, 0, 0, 0, time.UTC)
	long := strings.Repeat("open by pid 1 (sleep); ", 100)
	if err := s.Put(Entry{VolumeID: vol1, Node: "new", StagingPath: "/s/new", Device: "/dev/loop7",
		Pending: &PendingDetach{Device: "/dev/loop7", Holders: long, Seen: seen}}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Of(vol1)
	if err != nil || len(got) != 2 {
		t.Fatalf("Of = %+v, %v", got, err)
	}
	if got[0].Node != "new" || got[0].Device != "/dev/loop7" || got[0].Pending == nil || got[0].Pending.Device != "/dev/loop7" ||
		!got[0].Pending.Seen.Equal(seen) || len(got[0].Pending.Holders) > MaxHolders || !strings.HasSuffix(got[0].Pending.Holders, "...") {
		t.Errorf("the new record read back as %+v (pending %+v)", got[0], got[0].Pending)
	}
	if got[1].Node != "old" || got[1].StagingPath != "/s/old" || got[1].Device != "" || got[1].Pending != nil {
		t.Errorf("an older node's record read as %+v", got[1])
	}
	if e, ok, err := s.Get(vol1, "old"); err != nil || !ok || e.StagingPath != "/s/old" {
		t.Errorf("Get(old) = %+v, %v, %v", e, ok, err)
	}
	if _, ok, err := s.Get(vol2, "old"); err != nil || ok {
		t.Errorf("Get of a volume not recorded = %v, %v", ok, err)
	}
}
