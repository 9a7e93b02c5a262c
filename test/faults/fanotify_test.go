package faults

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Kill points at the fscrypt ioctls. Adding a key, reading or setting a
// directory's policy and removing a key change neither the pool nor the
// mount table, so the watcher (killpoints_test.go) cannot see them. But
// each one is an ioctl on a file the driver opens first (hostos/fscrypt:
// the staging mount's root for the keyring, <staging>/data for the
// policy), and fanotify can hold an open until its listener answers
// (FAN_OPEN_PERM). An openGuard marks one staging mount, numbers the
// driver's opens there, and at the armed one SIGKILLs the driver while
// the kernel holds the open: the kill lands before that ioctl, and after
// every earlier one, exactly. The close that follows each ioctl
// (FAN_CLOSE_NOWRITE, a plain notification) marks "after" the last one,
// which the driver may outrun by a few system calls, as with the
// watcher's boundaries. A mount exists only once the driver made it, so
// a guard is placed on a stage that finds its mount (a retry), on an
// unstage, or on the filesystem of a device the test mounted before the
// driver's stage mounts it too (guardFilesystem).

// fsOpen is one open or close by the driver on a guarded mount.
type fsOpen struct {
	n     int    // 1, 2, ... in the order the driver made them (opens and closes)
	close bool   // a close, else an open
	rel   string // path under the mount ("." for its root)
}

func (o fsOpen) String() string {
	what := "open"
	if o.close {
		what = "close"
	}
	return fmt.Sprintf("#%d %s %s", o.n, what, o.rel)
}

// openGuard holds the driver's opens on one mount.
type openGuard struct {
	fd     *os.File
	mnt    string // paths are named relative to it
	driver func() *instance

	mu     sync.Mutex
	seen   []fsOpen
	armed  int // kill at the armed-th event (open or close); 0: none
	fired  chan fsOpen
	target *instance
	wg     sync.WaitGroup
}

// guardMount starts holding the driver's opens on the mount at mnt.
func guardMount(mnt string, driver func() *instance) (*openGuard, error) {
	return guard(mnt, unix.FAN_MARK_MOUNT, mnt, driver)
}

// guardFilesystem starts holding the driver's opens on every mount of
// the filesystem mounted at mnt, those made after it included (a mount
// of a device already mounted shares its filesystem: one superblock);
// paths are named relative to names, where the driver will mount it.
func guardFilesystem(mnt, names string, driver func() *instance) (*openGuard, error) {
	return guard(mnt, unix.FAN_MARK_FILESYSTEM, names, driver)
}

func guard(mnt string, kind uint, names string, driver func() *instance) (*openGuard, error) {
	fd, err := unix.FanotifyInit(unix.FAN_CLASS_CONTENT|unix.FAN_CLOEXEC|unix.FAN_NONBLOCK, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_LARGEFILE)
	if err != nil {
		return nil, fmt.Errorf("fanotify_init: %w", err)
	}
	if err := unix.FanotifyMark(fd, unix.FAN_MARK_ADD|kind,
		unix.FAN_OPEN_PERM|unix.FAN_CLOSE_NOWRITE|unix.FAN_ONDIR, unix.AT_FDCWD, mnt); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("fanotify_mark %s: %w", mnt, err)
	}
	// Non-blocking, so the file is Go's poller's: close ends a Read.
	g := &openGuard{fd: os.NewFile(uintptr(fd), "fanotify"), mnt: names, driver: driver, fired: make(chan fsOpen, 1)}
	g.wg.Add(1)
	go g.read()
	return g, nil
}

// arm makes the driver's nth open or close on the mount from now kill it.
func (g *openGuard) arm(n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.seen, g.armed, g.target = nil, n, g.driver()
	select {
	case <-g.fired:
	default:
	}
}

// disarm cancels an armed event that did not fire. disarm and a look at
// fired, in this order, tell for certain whether it fired.
func (g *openGuard) disarm() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.armed, g.target = 0, nil
}

// events returns what the driver did on the mount since arm.
func (g *openGuard) events() []fsOpen {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]fsOpen(nil), g.seen...)
}

// close stops holding opens (the kernel allows those still pending).
func (g *openGuard) close() {
	g.fd.Close()
	g.wg.Wait()
}

func (g *openGuard) read() {
	defer g.wg.Done()
	buf := make([]byte, 4096)
	for {
		n, err := g.fd.Read(buf)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return // closed
		}
		for off := 0; off+int(unsafe.Sizeof(unix.FanotifyEventMetadata{})) <= n; {
			ev := *(*unix.FanotifyEventMetadata)(unsafe.Pointer(&buf[off]))
			off += int(ev.Event_len)
			g.handle(ev)
		}
	}
}

// handle records an event of the driver's, kills at the armed one, and
// answers every open (anyone's: a guarded mount's opens all wait for it).
func (g *openGuard) handle(ev unix.FanotifyEventMetadata) {
	if ev.Fd < 0 {
		return
	}
	path, _ := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(ev.Fd)))
	rel, err := filepath.Rel(g.mnt, path)
	if err != nil {
		rel = path
	}
	g.mu.Lock()
	if g.target != nil && int(ev.Pid) == g.target.pid {
		o := fsOpen{n: len(g.seen) + 1, close: ev.Mask&unix.FAN_CLOSE_NOWRITE != 0, rel: rel}
		g.seen = append(g.seen, o)
		if o.n == g.armed {
			g.target.kill(fmt.Sprintf("the open guard, at %s", o))
			g.armed, g.target = 0, nil
			select {
			case g.fired <- o:
			default:
			}
		}
	}
	g.mu.Unlock()
	if ev.Mask&unix.FAN_OPEN_PERM != 0 {
		r := unix.FanotifyResponse{Fd: ev.Fd, Response: unix.FAN_ALLOW}
		_, _ = unix.Write(int(g.fd.Fd()), (*[unsafe.Sizeof(r)]byte)(unsafe.Pointer(&r))[:])
	}
	unix.Close(int(ev.Fd))
}
