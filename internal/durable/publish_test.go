package durable

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestPublish(t *testing.T) {
	dir := t.TempDir()
	path, tmp := filepath.Join(dir, "rec.json"), filepath.Join(dir, ".rec.tmp")
	if err := Publish(tmp, path, []byte("one"), false); err != nil {
		t.Fatal(err)
	}
	if err := Publish(tmp, path, []byte("two"), false); !errors.Is(err, unix.EEXIST) {
		t.Fatalf("second publish without replace: %v, want EEXIST", err)
	}
	if got, _ := os.ReadFile(path); string(got) != "one" {
		t.Fatalf("after a refused publish the file holds %q, want %q", got, "one")
	}
	if err := os.WriteFile(tmp, []byte("stale"), 0o600); err != nil { // a crashed writer's
		t.Fatal(err)
	}
	if err := Publish(tmp, path, []byte("three"), true); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); string(got) != "three" {
		t.Fatalf("after a replacing publish the file holds %q, want %q", got, "three")
	}
	if _, err := os.Lstat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temporary file left: %v", err)
	}
}
