package cephimage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"
)

// The environment that makes this test binary the image's ceph (TestMain):
// the rootfs to run it in, the network namespace to enter ("" stays in
// this one), and a directory of the host to show at the same path inside
// (the key directory internal/cephevict writes its keyring into).
const (
	envRootfs = "FILEVOL_CEPHIMAGE_ROOTFS"
	envNetns  = "FILEVOL_CEPHIMAGE_NETNS"
	envBind   = "FILEVOL_CEPHIMAGE_BIND"
)

// imagePath is the image's PATH (hack/tools/cmd/ociimage sets it).
const imagePath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// devices are the device nodes bound into the rootfs, as a container
// runtime gives them to a container.
var devices = []string{"null", "zero", "random", "urandom"}

// chrootCeph execs the image's /usr/bin/ceph with args as the chart runs
// the controller's filevol: in the rootfs, read-only
// (readOnlyRootFilesystem), with no capability (drop ALL), with /proc and
// the usual devices; in the network namespace netns. The mounts are made
// in a mount namespace of this process's own, so they end with it. It
// returns only on failure, with the exit code.
func chrootCeph(rootfs, netns, bind string, args []string) int {
	// Namespaces, root and capabilities are the thread's: the exec below
	// must come from the same one.
	runtime.LockOSThread()
	if err := enter(rootfs, netns, bind); err != nil {
		fmt.Fprintf(os.Stderr, "cephimage wrapper: %v\n", err)
		return 127
	}
	err := unix.Exec("/usr/bin/ceph", append([]string{"ceph"}, args...), []string{imagePath, "LC_ALL=C.UTF-8"})
	fmt.Fprintf(os.Stderr, "cephimage wrapper: exec /usr/bin/ceph in %s: %v\n", rootfs, err)
	return 127
}

type mnt struct {
	src, dst, fstype string
	flags            uintptr
}

// enter readies this thread for the exec: chrootCeph says what.
func enter(rootfs, netns, bind string) error {
	cwd, err := os.Getwd()
	if err != nil {
		return err
	}
	if netns != "" {
		f, err := os.Open(netns)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("enter %s: %w", netns, err)
		}
	}
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("unshare the mount namespace: %w", err)
	}
	mounts := []mnt{
		{"", "/", "", unix.MS_REC | unix.MS_PRIVATE},
		{rootfs, rootfs, "", unix.MS_BIND | unix.MS_REC},
		{"", rootfs, "", unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY},
		{"proc", filepath.Join(rootfs, "proc"), "proc", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC},
	}
	for _, d := range devices {
		mounts = append(mounts, mnt{"/dev/" + d, filepath.Join(rootfs, "dev", d), "", unix.MS_BIND})
	}
	if bind != "" {
		mounts = append(mounts, mnt{bind, filepath.Join(rootfs, bind), "", unix.MS_BIND})
	}
	for _, m := range mounts {
		if err := unix.Mount(m.src, m.dst, m.fstype, m.flags, ""); err != nil {
			return fmt.Errorf("mount %s on %s: %w", m.src, m.dst, err)
		}
	}
	if err := unix.Chroot(rootfs); err != nil {
		return err
	}
	if err := unix.Chdir(cwd); err != nil {
		if err := unix.Chdir("/"); err != nil {
			return err
		}
	}
	// No capability after the exec: root's are those of the bounding set.
	for c := 0; c < 64; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("drop capability %d: %w", c, err)
		}
	}
	return unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
}
