package csi

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// thawAttempts bounds the retries of a failed FITHAW: a filesystem left
// frozen blocks every writer of the pod until someone thaws it by hand.
const thawAttempts = 5

// withFrozen runs fn — a clone of volume id's image — with the volume's
// filesystem frozen (FIFREEZE) when it is mounted on this node, so the
// clone holds a consistent filesystem, not a crash image (issue 3). The
// filesystem is thawed whatever fn returns. The caller holds id's lock for
// the whole call: NodeUnstage takes it too, and unmounting a frozen
// filesystem would leave its superblock frozen with nobody to thaw it.
//
// A volume that is not mounted here (block, unstaged, or staged by another
// process's mount namespace) is cloned as it is: crash-consistent with
// reflink, which is atomic; the CO quiesces the application if it needs
// more. A filesystem someone else froze (FIFREEZE answers EBUSY) is already
// quiescent: it is cloned and left frozen, as its freezer expects.
func (s *ControllerService) withFrozen(id string, fn func() error) error {
	mp, err := s.freezePoint(id)
	if err != nil {
		return err
	}
	if mp == "" {
		return fn()
	}
	if err := s.host.Freeze(mp); err != nil {
		if errors.Is(err, unix.EBUSY) {
			klog.InfoS("filesystem already frozen by someone else; cloning it as it is and leaving it frozen", "volumeID", id, "mountPoint", mp)
			return fn()
		}
		return fmt.Errorf("freeze the filesystem of volume %s at %s: %w", id, mp, err)
	}
	t0 := time.Now()
	defer func() {
		klog.V(4).InfoS("filesystem thawed", "volumeID", id, "mountPoint", mp, "frozenFor", time.Since(t0))
	}()
	ferr := fn()
	var terr error
	for i := 0; i < thawAttempts; i++ {
		if terr = s.host.Thaw(mp); terr == nil {
			break
		}
		time.Sleep(time.Duration(i+1) * 10 * time.Millisecond)
	}
	if terr != nil {
		klog.ErrorS(terr, "FILESYSTEM LEFT FROZEN: thaw it by hand (fsfreeze -u)", "volumeID", id, "mountPoint", mp)
		return errors.Join(ferr, fmt.Errorf("thaw the filesystem of volume %s at %s (run fsfreeze -u %s): %w", id, mp, mp, terr))
	}
	return ferr
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
