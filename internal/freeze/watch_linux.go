package freeze

import (
	"context"
	"os"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// watch wakes the agent when a file in its directory appears, changes or
// goes. Without inotify (or on a shared filesystem, where it sees only
// this host's changes) the agent still polls.
func (a *Agent) watch(ctx context.Context) <-chan struct{} {
	wake := make(chan struct{}, 1)
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		klog.InfoS("no inotify; freeze requests are polled", "interval", a.Poll, "err", err)
		return wake
	}
	if _, err := unix.InotifyAddWatch(fd, a.dir, unix.IN_CREATE|unix.IN_MOVED_TO|unix.IN_MOVED_FROM|unix.IN_DELETE|unix.IN_CLOSE_WRITE); err != nil {
		unix.Close(fd)
		klog.InfoS("cannot watch the freeze directory; requests are polled", "dir", a.dir, "interval", a.Poll, "err", err)
		return wake
	}
	// Through the runtime's poller: Close unblocks the Read.
	f := os.NewFile(uintptr(fd), "inotify:"+a.dir)
	go func() { <-ctx.Done(); f.Close() }()
	go func() {
		buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
		for {
			if _, err := f.Read(buf); err != nil {
				return
			}
			select {
			case wake <- struct{}{}:
			default: // a sweep is pending already
			}
		}
	}()
	return wake
}
