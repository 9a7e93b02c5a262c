// Package fake is a stateful, in-memory hostos.Host for unit tests that
// must run without root: loop devices attached to backing files, a mount
// table that mounting, binding and unmounting keep consistent, filesystems
// "made" on images, freeze state, and errors injected per operation. Every
// operation is logged (Log), as k8s.io/mount-utils' FakeMounter does.
//
// It keeps the kernel's rules that the driver depends on, so a test of the
// driver's logic sees what a real node would show:
//   - a device is /dev/loopN (7:N), lowest free N, backed by the file with
//     symlinks resolved, sized like the file; Find reports it Deleted once
//     the file is gone;
//   - a filesystem lives in the backing file (a re-attached image still
//     carries it); mkfs on a read-only device fails;
//   - a mount of a device shows the device's major:minor (btrfs an
//     anonymous 0:N, with the device as source); a bind of a mount shares
//     its device, superblock and root (a bind of a directory inside it has
//     that directory as root); a bind of /proc/self/fd/N is a bind of
//     what the descriptor is open on (the link is followed, as the
//     kernel follows it); a bind of a device node shows as devtmpfs with
//     root /loopN;
//   - Detach of a device whose filesystem is mounted fails with
//     loop.ErrBusy and changes nothing; a device held open (HoldOpen) is
//     marked Detaching and goes at its last close; a bind of the node holds
//     nothing;
//   - unmounting a mount with mounts below it fails with EBUSY;
//   - a filesystem made with FormatOptions.Encrypt has an empty keyring
//     at every mount of it (Keys); no other filesystem can encrypt;
//   - mount points must exist on disk (the test's temporary directory):
//     a directory for a filesystem, a file for a device node.
//
// Locks, beside it, fakes OFD locks (internal/hostos/ofd's Locker) by the
// same measure (locks.go says which rules it keeps).
//
// It never touches the kernel: the only system calls are stat(2) on the
// test's files (and, for Locks, fcntl(F_GETFL) on the test's open files).
package fake

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/filevol/filevol/internal/hostos"
	"github.com/filevol/filevol/internal/hostos/fs"
	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/hostos/mount"
)

// Device numbers the fake hands out, as on Linux.
const (
	loopMajor     = 7
	devtmpfsMinor = 5 // devtmpfs is 0:5 on most nodes
	anonFirst     = 40
	rootMountID   = 1
)

// Host is the fake kernel. The zero value is not usable; call New.
type Host struct {
	mu       sync.Mutex
	devices  map[int]*device
	table    mount.Table
	nextID   int
	nextAnon uint32
	anon     map[string]uint32      // superblock key -> anonymous minor (btrfs, tmpfs)
	fs       map[string]*filesystem // backing file -> what mkfs made there
	stats    map[string]fs.Stats    // backing file -> statfs override
	frozen   map[string]bool        // superblock key
	opLog
	// keys are the filesystems' keyrings: a filesystem made with
	// FormatOptions.Encrypt gets a fresh one at each mount.
	keys *Keys
}

type device struct {
	loop.Device
	holders int    // processes holding it open (HoldOpen)
	owner   string // loop.Options.Owner
	// foreign: the device's backing file is another file that the kernel
	// shows under the same path (AddForeignDevice); BackedBy says no.
	foreign bool
	// unreachable: its backing file cannot be stat'ed any more (a dead
	// FUSE client's; SetUnreachable): BackedBy and Owner say nothing.
	unreachable bool
	// locked: attached with loop.Options.Lock or Mark, so it holds a lock
	// on its backing file (Locked sees it).
	locked bool
}

type filesystem struct {
	Type string
	Size int64
	// Encrypt: made with FormatOptions.Encrypt (ext4's encrypt feature).
	Encrypt bool
}

// New returns a fake with an empty loop list and a mount table holding
// only the root filesystem.
func New() *Host {
	h := &Host{
		devices: map[int]*device{},
		table: mount.Table{{ID: rootMountID, ParentID: rootMountID, Major: 8, Minor: 1, Root: "/", MountPoint: "/",
			Options: []string{"rw"}, FSType: "ext4", Source: "/dev/root", SuperOptions: []string{"rw"}}},
		nextID: 100,
		anon:   map[string]uint32{},
		fs:     map[string]*filesystem{},
		stats:  map[string]fs.Stats{},
		frozen: map[string]bool{},
		keys:   NewKeys(),
	}
	h.opLog.mu = &h.mu
	return h
}

// Host returns the fake as the seams the driver takes.
func (h *Host) Host() hostos.Host { return hostos.Host{Loops: h, Mounts: h, FS: h, Keys: h.keys} }

// Keys is the fake's fscrypt.Keys: a filesystem made encryptable is
// Encryptable at its mount point while mounted.
func (h *Host) Keys() *Keys { return h.keys }

// Fail makes every later call of op (a method name: "Attach", "Mount",
// "Format", ...) fail with err, before it changes anything; a nil err
// clears it.
func (h *Host) Fail(op string, err error) { h.setFail(op, failure{err: err}) }

// FailOnce makes the next call of op fail with err.
func (h *Host) FailOnce(op string, err error) { h.setFail(op, failure{err: err, once: true}) }

// Log returns the operations done so far, one line each ("mount /dev/loop0
// /stage ext4 [nosuid nodev]"); a failed one ends with ": " and the error.
func (h *Host) Log() []string { return h.lines() }

// Calls counts the logged operations op ("mount", "attach", ...),
// failed ones included.
func (h *Host) Calls(op string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, l := range h.log {
		// "table", "table: <error>" (no arguments), "find <path>"...
		if l == op || strings.HasPrefix(l, op+" ") || strings.HasPrefix(l, op+": ") {
			n++
		}
	}
	return n
}

// call is one call of the fake kernel, op, of one result: under h.mu,
// logged as name and args, failing with op's injected error before body
// runs, and with the error body returns added to its line; so no error
// path of a method can leave its line without its outcome.
func call[T any](h *Host, op, name string, args []any, body func() (T, error)) (T, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.begin(op, name, args...); err != nil {
		var zero T
		return zero, err
	}
	v, err := body()
	return v, h.done(err)
}

// do is call for an operation that returns an error alone.
func (h *Host) do(op, name string, args []any, body func() error) error {
	_, err := call(h, op, name, args, func() (struct{}, error) { return struct{}{}, body() })
	return err
}

// begin logs op and returns its injected error, if any. Held: h.mu. Get
// and Lookup, of two results, call it and done themselves.
func (h *Host) begin(op, name string, args ...any) error {
	line := name
	for _, a := range args {
		line += " " + fmt.Sprint(a)
	}
	return h.record(op, line)
}

// resolve names a file the way the kernel reports it: symlinks resolved
// where it exists.
func resolve(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return filepath.Clean(p)
}

func devNumber(path string) (int, bool) {
	n, err := strconv.Atoi(strings.TrimPrefix(path, "/dev/loop"))
	return n, err == nil && strings.HasPrefix(path, "/dev/loop") && n >= 0
}

// AddDevice shows d as attached, unchecked: a picture of a node set up
// before the test (another driver's device, a foreign one).
func (h *Host) AddDevice(d loop.Device) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.devices[d.Number] = &device{Device: d}
}

// AddForeignDevice shows d as attached by another node that shares this
// kernel: sysfs shows its backing file under the same path as a file of
// ours (that node's pool is mounted at the same path in its own mount
// namespace), but it is another file, so BackedBy is false for it.
func (h *Host) AddForeignDevice(d loop.Device) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.devices[d.Number] = &device{Device: d, foreign: true}
}

// SetUnreachable makes the attached device dev one whose backing file the
// kernel can no longer stat, as a device left on a dead FUSE client's file
// is after that client's mount was replaced: sysfs shows backingFile (the
// path relative to the dead mount), BackedBy and Owner nothing.
func (h *Host) SetUnreachable(dev, backingFile string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n, ok := devNumber(dev); ok && h.devices[n] != nil {
		h.devices[n].unreachable = true
		h.devices[n].BackingFile = backingFile
	}
}

// AddMount adds m to the mount table as it is, unchecked, with a fresh ID
// when it has none: a mount made before the test, or by someone else.
func (h *Host) AddMount(m mount.Info) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if m.ID == 0 {
		h.add(m)
		return
	}
	h.table = append(h.table, m)
}
