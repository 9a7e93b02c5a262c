package mount

import (
	"errors"
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// maxStack bounds UnmountAll: far more mounts than anything stacks on one
// path in practice, few enough that a path the kernel will not release
// fails quickly instead of spinning.
const maxStack = 32

func mountFS(source, target, fstype string, options []string) error {
	flags, data, err := splitOptions(options)
	if err != nil {
		return err
	}
	// The data string is left out of the error: options such as
	// credentials for network filesystems may hold secrets.
	if err := unix.Mount(source, target, fstype, flags, data); err != nil {
		return fmt.Errorf("mount %s on %s as %s: %w", source, target, fstype, tableFull(err))
	}
	return nil
}

// tableFull marks mount(2)'s ENOSPC, which it returns only when the
// namespace's mount count would exceed fs.mount-max, as ErrTableFull.
func tableFull(err error) error {
	if errors.Is(err, unix.ENOSPC) {
		return fmt.Errorf("%w: %w", ErrTableFull, err)
	}
	return err
}

// keptFlags are the per-mount restrictions a bind inherits from its
// source. A MS_REMOUNT|MS_BIND call sets the per-mount flags to exactly
// what it is given, so without re-adding these a read-only remount of a
// bind of a nodev,nosuid mount would quietly drop nodev and nosuid.
var keptFlags = []struct{ st, ms uintptr }{
	{unix.ST_RDONLY, unix.MS_RDONLY},
	{unix.ST_NOSUID, unix.MS_NOSUID},
	{unix.ST_NODEV, unix.MS_NODEV},
	{unix.ST_NOEXEC, unix.MS_NOEXEC},
	{stNoSymFollow, unix.MS_NOSYMFOLLOW},
}

// stNoSymFollow is ST_NOSYMFOLLOW from linux/statfs.h (Linux 5.10), which
// x/sys/unix does not define.
const stNoSymFollow = 0x2000

// perMountFlags are the flags a bind remount can change; superblock flags
// (sync, lazytime, mand) and filesystem data are ignored by the kernel on a
// bind remount, as they are by mount(8): they belong to the staging mount.
const perMountFlags = unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC |
	unix.MS_NOATIME | unix.MS_NODIRATIME | unix.MS_RELATIME | unix.MS_STRICTATIME |
	unix.MS_NOSYMFOLLOW

func bind(source, target string, readOnly bool, options []string) error {
	flags, _, err := splitOptions(options)
	if err != nil {
		return err
	}
	if err := unix.Mount(source, target, "", unix.MS_BIND|flags&unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s on %s: %w", source, target, tableFull(err))
	}
	extra := flags & perMountFlags
	if readOnly {
		extra |= unix.MS_RDONLY
	}
	if extra == 0 {
		return nil
	}
	// The kernel ignores MS_RDONLY (and every other flag) on the call that
	// creates a bind mount; they only take effect on a second, remount call.
	var st unix.Statfs_t
	err = unix.Statfs(target, &st)
	if err == nil {
		for _, k := range keptFlags {
			if uintptr(st.Flags)&k.st != 0 {
				extra |= k.ms
			}
		}
		err = unix.Mount("", target, "", unix.MS_REMOUNT|unix.MS_BIND|extra, "")
	}
	if err != nil {
		// Never leave a writable bind where a read-only one was asked for.
		err = fmt.Errorf("remount bind %s on %s: %w", source, target, err)
		if uerr := unix.Unmount(target, 0); uerr != nil {
			err = errors.Join(err, fmt.Errorf("undo bind on %s: %w", target, uerr))
		}
		return err
	}
	return nil
}

func unmount(target string) error {
	err := unix.Unmount(target, 0)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
		// EINVAL: not a mount point; ENOENT: the path is gone. Either way
		// nothing is mounted there any more.
		return nil
	default:
		// EBUSY and the rest keep their errno for errors.Is.
		return fmt.Errorf("unmount %s: %w", target, err)
	}
}

func unmountAll(target string) error {
	// mountinfo shows resolved paths, so look up what the kernel will
	// resolve target to; a target that cannot be resolved (gone, or a
	// dead FUSE mount) is looked up as given.
	path := filepath.Clean(target)
	if p, err := filepath.EvalSymlinks(target); err == nil {
		path = p
	}
	for range maxStack {
		t, err := Read()
		if err != nil {
			return err
		}
		stack := t.At(path)
		if len(stack) == 0 {
			return nil
		}
		err = unix.Unmount(target, 0)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			// The table still lists a mount the kernel cannot find by
			// path, e.g. one hidden under a later mount of a parent.
			return fmt.Errorf("unmount %s: %d mount(s) listed there but the path does not reach them: %w",
				target, len(stack), err)
		}
		if err != nil {
			return fmt.Errorf("unmount %s: %w", target, err)
		}
	}
	return fmt.Errorf("unmount %s: still mounted after %d unmounts", target, maxStack)
}
