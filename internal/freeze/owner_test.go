package freeze

import (
	"os"
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
