package faults

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/hostos/mount"
)

// Kill points without failpoints in the driver: the test watches what the
// driver does to the pool directory (inotify: every temp file, fsync'd
// record, rename and unlink of a create, delete, snapshot or expansion)
// and to the mount table (every stage, publish, unpublish and unstage),
// names each step boundary after it ("pool volumes/<id>.json renamed-in",
// "mount staging mounted (xfs)"), and, when armed with a name, SIGKILLs
// the driver the moment it sees that boundary. The driver runs on for the
// microseconds the event takes to arrive, so a kill lands at the boundary
// or at most a few system calls after it. The driver carries no test code.

// watcher reports step boundaries and kills the driver at an armed one.
type watcher struct {
	pool, kubelet string
	// barrierDir is where drain makes its files: pool itself, or, when
	// pool is a GlusterFS brick, the pool through a client mount (a file
	// made in the brick behind the server's back is not the volume's).
	barrierDir string
	st         *stats
	driver     func() *instance // the driver running now, nil if none

	mu        sync.Mutex
	armed     string
	countdown int // for anyPoint: boundaries still to pass
	// target is the driver the point is armed for: a boundary seen once it
	// is gone (the harness killed and restarted it, the events being the
	// new driver's or the reboot's) cancels the point and kills nothing.
	target *instance
	// fired receives the point that fired, sent under mu: after disarm
	// nothing arrives late, and arming empties it, so that a waiter never
	// takes a kill of an earlier arming for its own.
	fired chan string
	// scans counts the passes of pollMounts, for drain.
	scans atomic.Uint64
	// barriers: the barrier files drain waits for, by name.
	barriers map[string]chan struct{}
	nBarrier int

	// Loop devices (killpoints_loop_test.go), when watched.
	uevents   *os.File
	loopRoots []string
	ours      map[string]bool // loopN → backed by a file under loopRoots; under mu

	ino   *os.File
	inoFD int
	wds   map[int32]watched // watch descriptor → directory
	// roots are pool and spec.mirrors: the directories whose trees are
	// watched, the same pool as several clients mount it. treeErr is the
	// first failure to watch them again (drain), under mu.
	roots   []string
	treeErr error
	stopped atomic.Bool
	wg      sync.WaitGroup
}

// watchKillPoints starts watching pool (which must exist) and the mounts
// under kubelet.
func watchKillPoints(poolDir, kubelet string, st *stats, driver func() *instance) (*watcher, error) {
	return watchKillPointsOf(watchSpec{pool: poolDir, barrierDir: poolDir, kubelet: kubelet}, st, driver)
}

// watchSpec says what a watcher watches.
type watchSpec struct {
	// pool is the directory whose changes are boundaries: the pool, or the
	// pool's directory in a GlusterFS brick. inotify sees only the changes
	// made through the kernel that runs it: on a FUSE mount, those of that
	// mount's own client, never another node's; on the brick, the server's
	// own filesystem, every client's, each one as the server carries it
	// out, before the client's call returns. So a shared pool on GlusterFS
	// is watched on its brick: the controller's and every node's writes
	// are seen there, in the order the server made them, which is the
	// order of the calls, since every one of them waits for its reply.
	// Polling the pool through a mount instead would see a change up to a
	// period late and miss a file made and renamed away within one.
	pool string
	// barrierDir is the same directory as a process of the pool sees it,
	// where drain makes its files.
	barrierDir string
	kubelet    string
	// loopRoots: when set, loop devices backed by files under them are
	// watched too (killpoints_loop_test.go).
	loopRoots []string
	// mirrors are the pool as the other processes' clients mount it, when
	// the storage has no brick to watch: a CephFS keeps its files as RADOS
	// objects, so each process's ceph-fuse mount is watched, where inotify
	// sees that client's own changes as the process makes them (and none
	// of the others'). Every event comes through the one inotify queue in
	// the order the kernel made it, so drain's barrier in pool also stands
	// for the mirrors.
	mirrors []string
}

// watched is a watched directory: its root and its path below it.
type watched struct{ root, rel string }

func watchKillPointsOf(spec watchSpec, st *stats, driver func() *instance) (*watcher, error) {
	poolDir := spec.pool
	w := &watcher{pool: poolDir, barrierDir: spec.barrierDir, kubelet: spec.kubelet, st: st, driver: driver, fired: make(chan string, 1),
		wds: map[int32]watched{}, roots: append([]string{poolDir}, spec.mirrors...), barriers: map[string]chan struct{}{}}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	w.inoFD, w.ino = fd, os.NewFile(uintptr(fd), "inotify")
	if err := w.watchTrees(); err != nil {
		w.ino.Close()
		return nil, err
	}
	mi, err := openMountinfo()
	if err != nil {
		w.ino.Close()
		return nil, err
	}
	if len(spec.loopRoots) > 0 {
		if err := w.watchLoops(spec.loopRoots); err != nil {
			w.ino.Close()
			mi.Close()
			return nil, err
		}
	}
	w.wg.Add(2)
	go w.readInotify()
	go w.pollMounts(mi)
	return w, nil
}

const inotifyMask = unix.IN_CREATE | unix.IN_CLOSE_WRITE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_DELETE

// watchTrees watches every directory under the roots. Adding a watch
// again returns the directory's watch as it is, so this also takes in
// directories made since: on a mirror, those another client made, of
// which this mount's inotify said nothing.
func (w *watcher) watchTrees() error {
	for _, root := range w.roots {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				err = w.addWatch(root, path)
			}
			if errors.Is(err, fs.ErrNotExist) && path != root {
				return nil // removed meanwhile
			}
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func (w *watcher) addWatch(root, path string) error {
	wd, err := unix.InotifyAddWatch(w.inoFD, path, inotifyMask)
	if err != nil {
		return fmt.Errorf("inotify watch %s: %w", path, err)
	}
	rel, _ := filepath.Rel(root, path)
	w.mu.Lock()
	w.wds[int32(wd)] = watched{root, rel}
	w.mu.Unlock()
	return nil
}

func (w *watcher) close() {
	w.stopped.Store(true)
	w.ino.Close()
	if w.uevents != nil {
		w.uevents.Close()
	}
	w.wg.Wait()
}

// barrierPrefix names the files drain makes in the pool directory: never
// boundaries, and the pool does not look at its top directory's files.
const barrierPrefix = ".faults-barrier-"

// drain returns once the watcher has taken in every event that happened
// before it was called. It makes a file in the pool and waits for the
// file's event to come through the same inotify queue, then for a pass of
// pollMounts that began after the call. Arming starts from there:
// otherwise events of the steps before the armed call (the stage and
// publish just done), still queued when the machine is busy (make test
// runs packages side by side), would count as the call's own, and a kill
// would land early.
func (w *watcher) drain() {
	if len(w.roots) > 1 {
		// Directories another client made since are watched from here on.
		if err := w.watchTrees(); err != nil {
			w.mu.Lock()
			w.treeErr = cmp.Or(w.treeErr, err)
			w.mu.Unlock()
		}
	}
	scans := w.scans.Load()
	defer func() {
		// The pass running now may have read the table before the call;
		// the one after it began after.
		for end := time.Now().Add(10 * time.Second); w.scans.Load() < scans+2 && !w.stopped.Load() && time.Now().Before(end); {
			time.Sleep(time.Millisecond)
		}
	}()
	w.mu.Lock()
	w.nBarrier++
	name := fmt.Sprintf("%s%d", barrierPrefix, w.nBarrier)
	seen := make(chan struct{})
	w.barriers[name] = seen
	w.mu.Unlock()
	path := filepath.Join(w.barrierDir, name)
	if err := os.WriteFile(path, nil, 0o600); err == nil {
		select {
		case <-seen:
		case <-time.After(10 * time.Second):
		}
		_ = os.Remove(path)
	}
	w.mu.Lock()
	delete(w.barriers, name)
	w.mu.Unlock()
	if w.uevents != nil {
		w.rescanLoops()
	}
}

// watchErr is the first failure to watch directories made since the
// start: boundaries in them would go unseen.
func (w *watcher) watchErr() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.treeErr
}

// arm makes the next boundary called point kill the driver running now;
// fired receives the name when it did.
func (w *watcher) arm(point string) {
	w.drain()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.armLocked(point, 0)
}

// armLocked arms point for the driver running now, dropping a fire of an
// earlier arming that nobody took.
func (w *watcher) armLocked(point string, countdown int) {
	select {
	case <-w.fired:
	default:
	}
	w.armed, w.countdown, w.target = point, countdown, w.driver()
}

// anyPoint armed with armNth fires at the nth boundary of any kind.
const anyPoint = "*"

// armNth makes the nth step boundary from now, whatever it is, kill the
// driver.
func (w *watcher) armNth(n int) {
	w.drain()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.armLocked(anyPoint, n)
}

// disarm cancels an armed point that did not fire. A point that fired
// before is in fired: disarm and a look at fired, in this order, tell
// for certain whether it fired.
func (w *watcher) disarm() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.armed, w.target = "", nil
}

func (w *watcher) hit(point string) {
	w.mu.Lock()
	fire := w.armed != "" && w.armed == point
	if w.armed == anyPoint {
		w.countdown--
		fire = w.countdown == 0
	}
	if w.armed != "" && (w.target == nil || w.target.exited()) {
		// The driver it was armed for is gone: the harness killed it (the
		// call ended, or a delay ran out) and the boundary belongs to the
		// reboot or to the next driver, which it must not kill.
		fire = false
		w.armed, w.target = "", nil
	}
	if fire {
		w.target.kill(fmt.Sprintf("the watcher, at the kill point %q", point))
		w.armed, w.target = "", nil
		select {
		case w.fired <- point:
		default:
		}
	}
	w.mu.Unlock()
	w.st.add(func(s *stats) { s.points[point]++ })
}

var (
	// Both versions of IDs (internal/volid).
	reVolumeID = regexp.MustCompile(`fv(1-[a-z]+-[0-9a-f]{8})?-[0-9a-f]{32}`)
	reSnapID   = regexp.MustCompile(`fs(1-[0-9a-f]{8})?-[0-9a-f]{32}`)
	reRandom   = regexp.MustCompile(`\.json\.[0-9a-z]+$`)
	// os.CreateTemp's suffix (the in-use records' temporary files), a
	// freeze request's owner token, a freeze lock's inode number.
	reTempTail = regexp.MustCompile(`^(\.tmp-<hex>\.|\.owner-|#)[0-9a-z]+$`)
	reHex      = regexp.MustCompile(`[0-9a-f]{16,}`)
	reStamp    = regexp.MustCompile(`\d{8}T[\d.]+Z`)
)

// normalize turns a pool file name into the name of its kind of file.
func normalize(name string) string {
	name = reVolumeID.ReplaceAllString(name, "<id>")
	name = reSnapID.ReplaceAllString(name, "<sid>")
	name = reRandom.ReplaceAllString(name, ".json.<rand>")
	name = reStamp.ReplaceAllString(name, "<time>")
	name = reHex.ReplaceAllString(name, "<hex>")
	return reTempTail.ReplaceAllString(name, "$1<rand>")
}

var inotifyOps = []struct {
	mask uint32
	name string
}{
	{unix.IN_CREATE, "created"}, {unix.IN_CLOSE_WRITE, "written"}, {unix.IN_MOVED_FROM, "renamed-away"},
	{unix.IN_MOVED_TO, "renamed-in"}, {unix.IN_DELETE, "removed"},
}

func (w *watcher) readInotify() {
	defer w.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, err := w.ino.Read(buf)
		if err != nil {
			return // closed
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			nameBytes := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			off += unix.SizeofInotifyEvent + int(ev.Len)
			name := string(bytes.TrimRight(nameBytes, "\x00"))
			w.mu.Lock()
			dir, ok := w.wds[ev.Wd]
			w.mu.Unlock()
			rel := dir.rel
			if !ok || name == "" || name == ".lock" {
				continue
			}
			if strings.HasPrefix(name, barrierPrefix) {
				w.mu.Lock()
				if seen := w.barriers[name]; seen != nil && ev.Mask&unix.IN_CREATE != 0 {
					close(seen)
					delete(w.barriers, name)
				}
				w.mu.Unlock()
				continue
			}
			if ev.Mask&unix.IN_ISDIR != 0 {
				if ev.Mask&unix.IN_CREATE != 0 {
					_ = w.addWatch(dir.root, filepath.Join(dir.root, rel, name))
				}
				continue
			}
			for _, op := range inotifyOps {
				if ev.Mask&op.mask != 0 {
					w.hit("pool " + filepath.Join(rel, normalize(name)) + " " + op.name)
				}
			}
		}
	}
}

// pollMounts reports mounts appearing and disappearing under kubelet.
// mountinfo signals every change of the mount table with POLLPRI.
func (w *watcher) pollMounts(mi *os.File) {
	defer w.wg.Done()
	defer mi.Close()
	prev := w.mountsUnder(mi)
	for ; !w.stopped.Load(); w.scans.Add(1) {
		fds := []unix.PollFd{{Fd: int32(mi.Fd()), Events: unix.POLLPRI | unix.POLLERR}}
		n, err := unix.Poll(fds, 100)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return
		}
		if n == 0 {
			continue
		}
		cur := w.mountsUnder(mi)
		for mp, what := range cur {
			if _, ok := prev[mp]; !ok {
				w.hit("mount " + what + " mounted")
			}
		}
		for mp, what := range prev {
			if _, ok := cur[mp]; !ok {
				w.hit("mount " + what + " unmounted")
			}
		}
		prev = cur
	}
}

// openMountinfo opens /proc/self/mountinfo as a blocking file that Go's
// network poller does not know. os.Open registers any file whose driver
// can poll with the runtime's epoll set, and mountinfo can: each time the
// runtime's epoll_wait (busy with the harness's gRPC connections) checks
// the file, the kernel's mounts_poll takes the pending change for seen,
// and the POLLPRI that pollMounts waits for never comes. Stages and
// unstages went unseen: of 70 mounts and unmounts of a run, the watcher
// saw about half, none of them while a kill was armed, so NodeStageVolume
// was never killed at its mount and NodeUnstageVolume at its unmount.
func openMountinfo() (*os.File, error) {
	fd, err := unix.Open("/proc/self/mountinfo", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open mountinfo: %w", err)
	}
	// A blocking descriptor given to NewFile stays out of the poller.
	return os.NewFile(uintptr(fd), "/proc/self/mountinfo"), nil
}

// mountsUnder rereads mountinfo (which also rearms the poll) and returns
// the mounts under kubelet, each with the name of its kind.
func (w *watcher) mountsUnder(mi *os.File) map[string]string {
	out := map[string]string{}
	if _, err := mi.Seek(0, io.SeekStart); err != nil {
		return out
	}
	data, err := io.ReadAll(mi)
	if err != nil {
		return out
	}
	table, err := mount.Parse(data)
	if err != nil {
		return out
	}
	for _, m := range table.Under(w.kubelet) {
		rel, _ := filepath.Rel(w.kubelet, m.MountPoint)
		kind := "other"
		switch parts := strings.Split(rel, "/"); {
		case len(parts) == 4 && parts[0] == "plugins" && parts[3] == "device":
			kind = "staging device bind"
		case len(parts) == 3 && parts[0] == "plugins":
			kind = "staging"
		case len(parts) == 3 && parts[0] == "pods":
			kind = "target"
		case parts[len(parts)-1] == "staging": // a shared pool's node: <node>/kubelet/staging
			kind = "staging"
		}
		out[m.MountPoint+"\x00"+fmt.Sprint(m.ID)] = kind + " (" + m.FSType + ")"
	}
	return out
}

// pick returns the boundary seen so far that has been killed at least
// often (ties broken by r), or "" when none was seen.
func pickPoint(st *stats, r func(n int) int) string {
	st.mu.Lock()
	defer st.mu.Unlock()
	var best []string
	least := -1
	for p := range st.points {
		if k := st.killPoints[p]; least < 0 || k < least {
			best, least = []string{p}, k
		} else if k == least {
			best = append(best, p)
		}
	}
	if len(best) == 0 {
		return ""
	}
	slices.Sort(best)
	return best[r(len(best))]
}

// waitFired waits for an armed point to fire, up to d.
func (w *watcher) waitFired(d time.Duration, done <-chan struct{}) (string, bool) {
	select {
	case p := <-w.fired:
		return p, true
	case <-time.After(d):
	case <-done:
	}
	w.disarm()
	select { // it may have fired meanwhile
	case p := <-w.fired:
		return p, true
	default:
		return "", false
	}
}
