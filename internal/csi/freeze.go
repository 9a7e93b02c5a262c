package csi

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// thawAttempts bounds the retries of a failed FITHAW: a filesystem left
// frozen blocks every writer of the pod until someone thaws it.
const thawAttempts = 5

// withFrozen runs fn — a clone of volume id's image — with the volume's
// filesystem frozen (FIFREEZE) when it is mounted on this node, so the
// clone holds a consistent filesystem, not a crash image (issue 3). The
// filesystem is thawed whatever fn returns. The caller holds id's lock for
// the whole call: NodeUnstage takes it too, and unmounting a frozen
// filesystem would leave its superblock frozen with nobody to thaw it.
//
// The freeze is marked in the pool first (pool.MarkFrozen): a driver
// killed before the thaw leaves the mark, and the next start thaws what
// it names (ThawLeftovers).
//
// A volume that is not mounted here (block, unstaged) is cloned as it is:
// crash-consistent with reflink, which is atomic; the CO quiesces the
// application if it needs more. A filesystem someone else froze (FIFREEZE
// answers EBUSY, and no mark of ours names it) is already quiescent: it is
// cloned and left frozen, as its freezer expects.
func (s *ControllerService) withFrozen(id string, fn func() error) error {
	mp, err := s.freezePoint(id)
	if err != nil {
		return err
	}
	if mp == "" {
		return fn()
	}
	marks, err := s.pool.FrozenMarks()
	if err != nil {
		return err
	}
	ours := slices.Contains(marks, id) // a dead predecessor's freeze not thawed yet
	if err := s.pool.MarkFrozen(id); err != nil {
		return err
	}
	if err := s.host.Freeze(mp); err != nil {
		if !errors.Is(err, unix.EBUSY) {
			_ = s.pool.UnmarkFrozen(id)
			if c, cerr := s.pool.Capacity(); errors.Is(err, unix.EIO) && cerr == nil && c.FreeBytes < allocationUnit {
				// Freezing flushes the journal; on a thin volume whose pool
				// is full that write fails, and the kernel says EIO.
				return resourceExhausted("cannot freeze volume %s for a consistent snapshot: its pool is out of space (%d bytes free), so the filesystem cannot flush", id, c.FreeBytes)
			}
			return fmt.Errorf("freeze the filesystem of volume %s at %s: %w", id, mp, err)
		}
		if !ours {
			_ = s.pool.UnmarkFrozen(id)
			klog.InfoS("filesystem already frozen by someone else; cloning it as it is and leaving it frozen", "volumeID", id, "mountPoint", mp)
			return fn()
		}
	}
	t0 := time.Now()
	ferr := fn()
	if terr := s.thaw(id, mp); terr != nil {
		return errors.Join(ferr, terr)
	}
	klog.V(4).InfoS("filesystem thawed", "volumeID", id, "mountPoint", mp, "frozenFor", time.Since(t0))
	return ferr
}

// thaw thaws the filesystem at mp, retrying, and removes the mark once it
// is thawed. A mark is kept while the filesystem may still be frozen.
func (s *ControllerService) thaw(id, mp string) error {
	var err error
	for i := range thawAttempts {
		if err = s.host.Thaw(mp); err == nil {
			return s.pool.UnmarkFrozen(id)
		}
		time.Sleep(time.Duration(i+1) * 10 * time.Millisecond)
	}
	klog.ErrorS(err, "FILESYSTEM LEFT FROZEN: thaw it by hand (fsfreeze -u)", "volumeID", id, "mountPoint", mp)
	return fmt.Errorf("thaw the filesystem of volume %s at %s (run fsfreeze -u %s): %w", id, mp, mp, err)
}

// ThawLeftovers thaws the filesystems a killed predecessor froze and did
// not thaw (their marks are in the pool), before this process serves: their
// pods' writers are blocked until then. New calls it.
func (s *ControllerService) ThawLeftovers() {
	marks, err := s.pool.FrozenMarks()
	if err != nil {
		klog.ErrorS(err, "read freeze marks; filesystems a killed driver froze may still be frozen")
		return
	}
	for _, id := range marks {
		// Any mount of the filesystem's root thaws it. None: nothing to
		// thaw here (a reboot thawed it).
		cur, err := s.freezePoint(id)
		if err != nil {
			klog.ErrorS(err, "look up a filesystem left frozen", "volumeID", id)
			continue
		}
		if cur == "" {
			klog.InfoS("freeze mark of a filesystem no longer mounted; dropped", "volumeID", id)
			_ = s.pool.UnmarkFrozen(id)
			continue
		}
		if err := s.thaw(id, cur); err == nil {
			klog.InfoS("thawed a filesystem a killed driver had frozen for a snapshot or clone", "volumeID", id, "mountPoint", cur)
		}
	}
}

// freezePoint returns a mount point of the volume's filesystem on this
// node ("" when none): freezing acts on the filesystem (the superblock),
// so any mount of its root will do; the staging mount is usually first.
func (s *ControllerService) freezePoint(id string) (string, error) {
	u, err := volumeUsage(s.host, s.pool.ImagePath(id))
	if err != nil {
		return "", err
	}
	for _, m := range u.mounts {
		if m.Root == "/" {
			return m.MountPoint, nil
		}
	}
	return "", nil
}
