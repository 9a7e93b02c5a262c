package dirpooltest

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// ContainerCaps is the capability set a container runtime gives a
// container by default (containerd's and Docker's default spec): a
// root process in a pod has exactly these, and no CAP_SYS_ADMIN,
// CAP_SYS_RESOURCE, CAP_LINUX_IMMUTABLE or CAP_DAC_READ_SEARCH.
var ContainerCaps = []int{
	unix.CAP_CHOWN, unix.CAP_DAC_OVERRIDE, unix.CAP_FSETID, unix.CAP_FOWNER,
	unix.CAP_MKNOD, unix.CAP_NET_RAW, unix.CAP_SETGID, unix.CAP_SETUID,
	unix.CAP_SETFCAP, unix.CAP_SETPCAP, unix.CAP_NET_BIND_SERVICE,
	unix.CAP_SYS_CHROOT, unix.CAP_KILL, unix.CAP_AUDIT_WRITE,
}

// AsPod runs fn as a pod's root process would: on an OS thread of its
// own whose effective, permitted and inheritable capabilities are cut
// to caps (ContainerCaps for a default container). Capabilities are a
// thread's, so the thread is never handed back to the runtime (it exits
// with fn's goroutine), and fn must make its system calls itself, not
// through other goroutines. It fails the test if the thread still
// holds CAP_SYS_ADMIN afterwards (the drop did not take).
func AsPod(t testing.TB, caps []int, fn func()) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with this goroutine
		var set [2]uint32
		for _, c := range caps {
			set[c/32] |= 1 << (c % 32)
		}
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		data := [2]unix.CapUserData{}
		for i := range data {
			data[i] = unix.CapUserData{Effective: set[i], Permitted: set[i]}
		}
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			errc <- err
			return
		}
		var got [2]unix.CapUserData
		if err := unix.Capget(&hdr, &got[0]); err != nil {
			errc <- err
			return
		}
		if got[unix.CAP_SYS_ADMIN/32].Effective&(1<<(unix.CAP_SYS_ADMIN%32)) != 0 {
			errc <- unix.EPERM
			return
		}
		defer func() { errc <- nil }()
		fn()
	}()
	if err := <-errc; err != nil {
		t.Fatalf("dropping to a pod's capabilities: %v", err)
	}
}
