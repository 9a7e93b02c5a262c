package freeze

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func groupVol(i int) string { return fmt.Sprintf("fv1-img-3f9a0c2e-%032x", 0x100+i) }

// Every mounted filesystem of the group is frozen before the clone runs
// and thawed after it; a volume with nothing mounted is cloned as it is.
func TestHoldAllFreezesEveryVolumeBeforeTheClone(t *testing.T) {
	dir := t.TempDir()
	k := newKernel()
	var targets []Target
	for i := range 8 {
		if i != 3 { // volume 3 is staged nowhere
			k.mounts[groupVol(i)] = fmt.Sprintf("/staging/%d", i)
		}
		targets = append(targets, Target{VolumeID: groupVol(i), Node: "n"})
	}
	start(t, k.agent(t, dir, "n"))
	ran := false
	err := requester(t, dir).HoldAll(context.Background(), targets, func() error {
		ran = true
		for i := range 8 {
			if mp := k.mounts[groupVol(i)]; mp != "" && !k.isFrozen(mp) {
				return fmt.Errorf("volume %d is not frozen during the clone", i)
			}
		}
		return nil
	})
	if err != nil || !ran {
		t.Fatalf("HoldAll = %v (clone ran: %v)", err, ran)
	}
	for i := range 8 {
		if mp := k.mounts[groupVol(i)]; mp != "" && k.isFrozen(mp) {
			t.Errorf("volume %d still frozen after HoldAll", i)
		}
		if k.isLocked(groupVol(i)) {
			t.Errorf("volume %d still locked after HoldAll", i)
		}
	}
	if k.markCount() != 0 || k.freezes != 7 {
		t.Errorf("marks %d, freezes %d; want 0 and 7", k.markCount(), k.freezes)
	}
	assertEmpty(t, dir)
}

// One filesystem that cannot be frozen: the clone never runs, the others
// are thawed, and the error names the volume.
func TestHoldAllThawsTheOthersWhenOneFails(t *testing.T) {
	dir := t.TempDir()
	k := newKernel()
	var targets []Target
	for i := range 4 {
		k.mounts[groupVol(i)] = fmt.Sprintf("/staging/%d", i)
		targets = append(targets, Target{VolumeID: groupVol(i), Node: "n"})
	}
	a := k.agent(t, dir, "n")
	freeze := a.Freeze
	a.Freeze = func(mp string) error {
		if mp == "/staging/2" {
			return unix.EROFS
		}
		return freeze(mp)
	}
	start(t, a)
	err := requester(t, dir).HoldAll(context.Background(), targets, func() error {
		return errors.New("the clone ran although a filesystem was not frozen")
	})
	if !errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), groupVol(2)) {
		t.Fatalf("HoldAll = %v, want ErrFailed naming %s", err, groupVol(2))
	}
	for i := range 4 {
		if k.isFrozen(fmt.Sprintf("/staging/%d", i)) {
			t.Errorf("volume %d left frozen", i)
		}
	}
	if k.markCount() != 0 {
		t.Errorf("%d freeze marks left", k.markCount())
	}
	assertEmpty(t, dir)
}

// A volume whose freeze another snapshot holds: ErrBusy, and nothing of
// the group is left frozen or asked for.
func TestHoldAllOfABusyVolumeIsBusy(t *testing.T) {
	dir := t.TempDir()
	k := newKernel()
	for i := range 3 {
		k.mounts[groupVol(i)] = fmt.Sprintf("/staging/%d", i)
	}
	start(t, k.agent(t, dir, "n"))
	r := requester(t, dir)
	err := r.Hold(context.Background(), groupVol(1), "n", func() error {
		return r.HoldAll(context.Background(), []Target{{groupVol(0), "n"}, {groupVol(1), "n"}, {groupVol(2), "n"}},
			func() error { return errors.New("the clone ran") })
	})
	if !errors.Is(err, ErrBusy) {
		t.Fatalf("HoldAll inside a Hold of one member = %v, want ErrBusy", err)
	}
	for i := range 3 {
		if k.isFrozen(fmt.Sprintf("/staging/%d", i)) {
			t.Errorf("volume %d left frozen", i)
		}
	}
	assertEmpty(t, dir)
}

// The controller dies while the group is frozen: the node sees its owner
// lock free and thaws every filesystem of the group, without waiting for
// the lease.
func TestHoldAllOfADeadControllerIsThawed(t *testing.T) {
	dir := t.TempDir()
	k := newKernel()
	var targets []Target
	for i := range 4 {
		k.mounts[groupVol(i)] = fmt.Sprintf("/staging/%d", i)
		targets = append(targets, Target{VolumeID: groupVol(i), Node: "n"})
	}
	start(t, k.agent(t, dir, "n"))
	r := requester(t, dir)
	r.Lease = time.Hour
	thawed := false
	err := r.HoldAll(context.Background(), targets, func() error {
		r.owner.f.Close() // the kernel drops the lock of a dead process
		// Bounded, not timed: the node thaws on its next sweep.
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && !thawed; time.Sleep(5 * time.Millisecond) {
			thawed = true
			for i := range 4 {
				thawed = thawed && !k.isFrozen(fmt.Sprintf("/staging/%d", i))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("HoldAll = %v", err)
	}
	if !thawed {
		t.Fatal("the group stayed frozen after its controller died")
	}
	if k.markCount() != 0 {
		t.Errorf("%d freeze marks left", k.markCount())
	}
}
