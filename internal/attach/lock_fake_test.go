package attach

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/hostos/fake"
	"github.com/filevol/filevol/internal/hostos/ofd"
)

// fakeLocked is a store whose locks are a fake kernel's.
func fakeLocked(t *testing.T) (*Store, *fake.Locks) {
	t.Helper()
	s, locks := New(t.TempDir()), fake.NewLocks()
	s.locks = locks
	if err := s.makeDir(); err != nil {
		t.Fatal(err)
	}
	return s, locks
}

// A controller replica on another host holds the volume's byte: this
// one's change waits for it and goes on when it lets go, and other
// volumes' bytes are free meanwhile.
func TestVolumeLockWaitsForAReplicaElsewhere(t *testing.T) {
	s, locks := fakeLocked(t)
	release, err := locks.HoldElsewhere(filepath.Join(s.dir, LocksName), ofd.Write, ofd.Range{Start: lockOffset(vol), Len: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.withLock("fv1-img-3f9a0c2e-ffffffffffffffffffffffffffffffff", func() error { return nil }); err != nil {
		t.Fatalf("another volume's change: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- s.withLock(vol, func() error { return nil }) }()
	select {
	case err := <-done:
		t.Fatalf("the change went on while another replica held the volume's lock: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// GlusterFS answers a lock on a file that an earlier version's delete
// unlinked around the request with ESTALE (or ENOENT), which a local
// filesystem never does: the lock file is looked for again, and the
// one under the name now is locked.
func TestEarlierVersionsStaleLockFileIsLookedForAgain(t *testing.T) {
	s, locks := fakeLocked(t)
	legacy := s.legacyLockPath(vol)
	if err := os.WriteFile(legacy, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	locks.FailOnce("Lock", unix.ESTALE)
	f, err := s.lockLegacy(vol)
	if err != nil || f == nil {
		t.Fatalf("got %v, %v; want the lock file, locked", f, err)
	}
	defer f.Close()
	held, err := locks.Held(legacy)
	if err != nil || len(held) != 1 || held[0].Type != ofd.Write {
		t.Fatalf("locks on the legacy file: %v, %v", held, err)
	}
	var stale int
	for _, l := range locks.Log() {
		if strings.HasPrefix(l, "Lock ") && strings.HasSuffix(l, ": "+unix.ESTALE.Error()) {
			stale++
		}
	}
	if stale != 1 {
		t.Fatalf("log %q: want one stale answer before the lock", locks.Log())
	}
	if f, err := s.lockLegacy("fv1-img-3f9a0c2e-00000000000000000000000000000000"); f != nil || err != nil {
		t.Fatalf("a volume without a legacy file: %v, %v; want nothing to hold", f, err)
	}
}
