package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestCopyPlugin(t *testing.T) {
	d := t.TempDir()
	src := filepath.Join(d, "plugin")
	want := bytes.Repeat([]byte("plugin bytes "), 100000)
	if err := os.WriteFile(src, want, 0o600); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(d, "target")
	if err := os.Mkdir(target, 0o777); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(target, "velero-plugin-for-aws")
	if err := copyPlugin(src, dst); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("copied %d bytes, want the %d of the source", len(got), len(want))
	}
	if fi, _ := os.Stat(dst); fi.Mode().Perm() != 0o755 {
		t.Fatalf("mode %v, want 0755 (the server executes it)", fi.Mode().Perm())
	}
	// A second copy (the init container runs again on a restart) replaces it.
	if err := copyPlugin(src, dst); err != nil {
		t.Fatal(err)
	}

	// Failures leave nothing in the target directory.
	if err := copyPlugin(filepath.Join(d, "missing"), dst); err == nil {
		t.Fatal("a missing source was copied")
	}
	if err := copyPlugin(target, filepath.Join(target, "dir-copy")); err == nil {
		t.Fatal("a directory was copied")
	}
	ents, _ := os.ReadDir(target)
	if len(ents) != 1 || ents[0].Name() != "velero-plugin-for-aws" {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("target holds %q, want only velero-plugin-for-aws", names)
	}
}
