package snapshot

import (
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/hostos/fs"
	"github.com/filevol/filevol/test/driver"
)

// TestThawLeftovers: a driver killed between FIFREEZE and FITHAW leaves the
// pod's filesystem frozen and its freeze mark in the pool; the next start
// thaws it before serving. A filesystem someone else froze (no mark) is
// snapshotted as it is and left frozen for its freezer.
func TestThawLeftovers(t *testing.T) {
	d := startOn(t, poolExt4, 2<<30)
	v := create(t, d, "frozen", 512<<20, driver.MountCap("xfs"), nil, nil)
	up(t, d, v)
	// What a kill inside CreateSnapshot leaves behind.
	if err := d.Pool.NodeState().Frozen.Set(v.id); err != nil {
		t.Fatal(err)
	}
	if err := fs.Freeze(v.staging); err != nil {
		t.Fatal(err)
	}
	d.Stop(t)
	if err := d.Pool.Close(); err != nil {
		t.Fatal(err)
	}
	d = driver.Start(t, d.Dir)
	t.Cleanup(func() { d.Stop(t); _ = d.Pool.Close() })
	if err := writeWithin(v, pattern(11, 1<<20), 5*time.Second); err != nil {
		_ = fs.Thaw(v.staging)
		t.Fatalf("the restarted driver did not thaw the filesystem its predecessor froze: %v", err)
	}
	if marks, err := d.Pool.NodeState().Frozen.IDs(); err != nil || len(marks) != 0 {
		t.Errorf("freeze marks after the thaw: %v, %v", marks, err)
	}

	// Someone else's freeze.
	if err := fs.Freeze(v.staging); err != nil {
		t.Fatal(err)
	}
	snapshot(t, d, "while-frozen", v.id)
	if err := fs.Freeze(v.staging); !errors.Is(err, unix.EBUSY) {
		t.Errorf("after a snapshot of a filesystem someone else froze, FIFREEZE = %v, want EBUSY (still frozen)", err)
	}
	if err := fs.Thaw(v.staging); err != nil {
		t.Fatal(err)
	}
	down(t, d, v)
}
