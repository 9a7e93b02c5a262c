package faults

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/hostos/loop"
)

// Loop devices as step boundaries: a node's NodeStageVolume attaches the
// image to a loop device holding its fence lock (loop.Options.Lock) and
// NodeUnstageVolume detaches it, and neither touches the pool or the
// mount table at that moment, so neither inotify nor mountinfo sees it.
// The kernel announces both on its uevent netlink socket: LOOP_CONFIGURE
// sends a "change" for loopN once the device is set up (the lock is taken
// before it), LOOP_CLR_FD a "change" once the backing file is dropped.
// The uevent is sent inside the ioctl, before it returns to the driver, so
// a kill armed on it lands right after the attach or detach, as a pool
// event's does. Only devices backed by a file under one of the roots
// count: other tests on the machine attach loop devices of their own.

const (
	loopAttached = "loop device attached"
	loopDetached = "loop device detached"
)

// watchLoops starts reporting attaches and detaches of loop devices
// backed by files under roots.
func (w *watcher) watchLoops(roots []string) error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_KOBJECT_UEVENT)
	if err != nil {
		return fmt.Errorf("uevent socket: %w", err)
	}
	// Room for bursts of other tests' devices; an overflow (ENOBUFS) is
	// recovered from by rereading every device.
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: 1}); err != nil {
		unix.Close(fd)
		return fmt.Errorf("uevent socket: %w", err)
	}
	// Non-blocking, so the file is Go's poller's: close ends a Read.
	w.uevents = os.NewFile(uintptr(fd), "uevents")
	w.loopRoots = roots
	w.ours = map[string]bool{}
	devs, err := loop.List()
	if err != nil {
		w.uevents.Close()
		return err
	}
	for _, d := range devs {
		if w.underLoopRoots(d.BackingFile) {
			w.ours[strings.TrimPrefix(d.Path, "/dev/")] = true
		}
	}
	w.wg.Add(1)
	go w.readUevents()
	return nil
}

func (w *watcher) underLoopRoots(path string) bool {
	for _, r := range w.loopRoots {
		if strings.HasPrefix(path, r+"/") {
			return true
		}
	}
	return false
}

func (w *watcher) readUevents() {
	defer w.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, err := w.uevents.Read(buf)
		if errors.Is(err, unix.ENOBUFS) {
			w.rescanLoops()
			continue
		}
		if err != nil {
			return // closed
		}
		fields := bytes.Split(buf[:n], []byte{0})
		var dev string
		block := false
		for _, f := range fields {
			if v, ok := bytes.CutPrefix(f, []byte("DEVNAME=")); ok {
				dev = string(v)
			}
			if bytes.Equal(f, []byte("SUBSYSTEM=block")) {
				block = true
			}
		}
		if num, ok := strings.CutPrefix(dev, "loop"); block && ok && num != "" && strings.Trim(num, "0123456789") == "" {
			w.loopChanged(dev)
		}
	}
}

// loopChanged compares what the device is backed by now with what it was.
// A detach sends two uevents (the device cleared, then its media change):
// only the first finds a change. The device is read under mu, so that
// drain's rescan and a uevent of the same change report it once.
func (w *watcher) loopChanged(dev string) {
	w.mu.Lock()
	data, _ := os.ReadFile("/sys/block/" + dev + "/loop/backing_file")
	backing := strings.TrimSuffix(strings.TrimSpace(string(data)), " (deleted)")
	now := backing != "" && w.underLoopRoots(backing)
	was := w.ours[dev]
	if now {
		w.ours[dev] = true
	} else {
		delete(w.ours, dev)
	}
	w.mu.Unlock()
	switch {
	case now && !was:
		w.hit(loopAttached)
	case was && !now:
		w.hit(loopDetached)
	}
}

// rescanLoops catches up after lost uevents, and is drain's barrier: a
// uevent still queued from before drain finds its change reported already.
// (The kernel sends it before the ioctl returns, but this goroutine may
// not have read it yet.)
func (w *watcher) rescanLoops() {
	w.mu.Lock()
	known := make([]string, 0, len(w.ours))
	for dev := range w.ours {
		known = append(known, dev)
	}
	w.mu.Unlock()
	devs, err := loop.List()
	if err != nil {
		return
	}
	for _, d := range devs {
		known = append(known, strings.TrimPrefix(d.Path, "/dev/"))
	}
	for _, dev := range known {
		w.loopChanged(dev)
	}
}
