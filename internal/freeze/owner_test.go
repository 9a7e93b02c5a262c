package freeze

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The owner file appears only locked: nothing a kill could leave behind
// under a temporary name, and a live owner is never taken for dead.
func TestOwnerFileIsLockedWhenNamed(t *testing.T) {
	dir := t.TempDir()
	var o owner
	name, err := o.get(dir)
	if err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tmpPrefix) {
			t.Errorf("temporary file left: %s", e.Name())
		}
	}
	if !ownerAlive(dir, name) {
		t.Fatal("a live owner looks dead")
	}
	removeDeadOwners(dir)
	if _, err := os.Stat(dir + "/" + name); err != nil {
		t.Fatalf("a live owner's file was removed: %v", err)
	}
	o.f.Close()
	if ownerAlive(dir, name) {
		t.Fatal("a closed owner looks alive")
	}
	removeDeadOwners(dir)
	if _, err := os.Stat(dir + "/" + name); !os.IsNotExist(err) {
		t.Fatalf("a dead owner's file is still there: %v", err)
	}
}

// Probes of a dead owner that overlap (the agent's sweep and the next
// controller's publish look at one request at once) both find it dead: a
// probe takes no lock that another probe could take for the owner's. Two
// open descriptions of the owner file stand for two probes in flight; a
// live owner is seen alive through either.
func TestOverlappingProbesSeeADeadOwnerDead(t *testing.T) {
	dir := t.TempDir()
	var o owner
	name, err := o.get(dir)
	if err != nil {
		t.Fatal(err)
	}
	var probes [2]*os.File
	for i := range probes {
		if probes[i], err = os.OpenFile(filepath.Join(dir, name), os.O_RDWR, 0); err != nil {
			t.Fatal(err)
		}
		defer probes[i].Close()
	}
	for i, f := range probes {
		if !lockHeld(f) {
			t.Fatalf("probe %d takes a live owner for dead", i)
		}
	}
	o.f.Close() // the owner dies
	for i, f := range probes {
		if lockHeld(f) {
			t.Fatalf("probe %d, while probe %d is still in flight, takes the dead owner for alive", i, 1-i)
		}
	}
}
