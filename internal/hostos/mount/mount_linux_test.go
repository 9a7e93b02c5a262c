package mount

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/testutil"
)

// scratch is a fresh directory under /tmp/filevol-test/mount, cleaned of
// whatever a killed earlier run left there.
func scratch(t *testing.T) string {
	t.Helper()
	testutil.RequireRoot(t)
	return testutil.Scratch(t, "mount")
}

// newDevice makes a sparse image in dir, attaches it and, when mkfs is
// given (e.g. "mkfs.ext4"), formats it.
func newDevice(t *testing.T, dir, mkfs string) loop.Device {
	t.Helper()
	img := filepath.Join(dir, "img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 512<<20); err != nil {
		t.Fatal(err)
	}
	dev, err := loop.Attach(context.Background(), img, loop.Options{DirectIO: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := loop.Detach(dev.Path); err != nil {
			t.Errorf("detach: %v", err)
		}
	})
	if mkfs != "" {
		if _, err := exec.LookPath(mkfs); err != nil {
			t.Skipf("%s is not installed (apt-get install e2fsprogs xfsprogs btrfs-progs)", mkfs)
		}
		if out, err := exec.Command(mkfs, "-q", dev.Path).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", mkfs, err, out)
		}
	}
	return dev
}

func mkdir(t *testing.T, path string) string {
	t.Helper()
	if err := os.MkdirAll(path, 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// mounted returns the top mount at path, failing the test when there is none.
func mounted(t *testing.T, path string) Info {
	t.Helper()
	table, err := Read()
	if err != nil {
		t.Fatal(err)
	}
	at := table.At(path)
	if len(at) == 0 {
		t.Fatalf("nothing mounted at %s", path)
	}
	return at[len(at)-1]
}

func notMounted(t *testing.T, path string) {
	t.Helper()
	table, err := Read()
	if err != nil {
		t.Fatal(err)
	}
	if at := table.At(path); len(at) != 0 {
		t.Fatalf("%s is still mounted: %+v", path, at)
	}
}

func TestMountUnmountExt4(t *testing.T) {
	dir := scratch(t)
	dev := newDevice(t, dir, "mkfs.ext4")
	stage := mkdir(t, filepath.Join(dir, "stage"))

	err := Mount(dev.Path, stage, "ext4", []string{"ro", "noatime", "nosuid", "errors=remount-ro"})
	if err != nil {
		t.Fatal(err)
	}
	m := mounted(t, stage)
	if m.FSType != "ext4" || m.Source != dev.Path || m.Major != dev.Major || m.Minor != dev.Minor {
		t.Errorf("mount = %+v, want ext4 from %s (%d:%d)", m, dev.Path, dev.Major, dev.Minor)
	}
	if !m.ReadOnly() || !slices.Contains(m.Options, "noatime") || !slices.Contains(m.Options, "nosuid") {
		t.Errorf("options = %v / %v, want ro,noatime,nosuid", m.Options, m.SuperOptions)
	}
	if !slices.Contains(m.SuperOptions, "errors=remount-ro") {
		t.Errorf("super options = %v, want errors=remount-ro", m.SuperOptions)
	}

	// Busy: a file held open in the filesystem keeps it mounted.
	f, err := os.Open(stage)
	if err != nil {
		t.Fatal(err)
	}
	if err := Unmount(stage); !errors.Is(err, unix.EBUSY) {
		t.Errorf("Unmount with an open file = %v, want EBUSY", err)
	}
	f.Close()

	for range 2 { // idempotent: the second call finds nothing mounted
		if err := Unmount(stage); err != nil {
			t.Fatal(err)
		}
		notMounted(t, stage)
	}
	if err := Unmount(filepath.Join(dir, "does-not-exist")); err != nil {
		t.Errorf("Unmount of a missing path = %v, want nil", err)
	}
}

func TestMountErrors(t *testing.T) {
	dir := scratch(t)
	dev := newDevice(t, dir, "mkfs.ext4")
	stage := mkdir(t, filepath.Join(dir, "stage"))
	if err := Mount(dev.Path, stage, "ext4", []string{"no-such-ext4-option"}); !errors.Is(err, unix.EINVAL) {
		t.Errorf("unknown data option: %v, want EINVAL", err)
	}
	if err := Mount(dev.Path, stage, "ext4", []string{"ro,nosuid"}); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("malformed option: %v, want ErrInvalidOption", err)
	}
	notMounted(t, stage)
}

func TestBindDirectory(t *testing.T) {
	dir := scratch(t)
	dev := newDevice(t, dir, "mkfs.ext4")
	stage := mkdir(t, filepath.Join(dir, "stage"))
	if err := Mount(dev.Path, stage, "ext4", []string{"nodev", "nosuid"}); err != nil {
		t.Fatal(err)
	}
	sub := mkdir(t, filepath.Join(stage, "sub"))
	rw := mkdir(t, filepath.Join(dir, "rw"))
	ro := mkdir(t, filepath.Join(dir, "ro"))

	if err := Bind(sub, rw, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rw, "f"), []byte("x"), 0o644); err != nil {
		t.Errorf("write through rw bind: %v", err)
	}
	if m := mounted(t, rw); m.ReadOnly() || m.Root != "/sub" {
		t.Errorf("rw bind = %+v, want writable with root /sub", m)
	}

	if err := Bind(sub, ro, true, []string{"noexec", "discard"}); err != nil {
		t.Fatal(err)
	}
	err := os.WriteFile(filepath.Join(ro, "g"), []byte("x"), 0o644)
	if !errors.Is(err, unix.EROFS) {
		t.Errorf("write through ro bind = %v, want EROFS", err)
	}
	m := mounted(t, ro)
	// nodev and nosuid come from the staging mount and must survive the
	// read-only remount; noexec was asked for.
	for _, o := range []string{"ro", "noexec", "nodev", "nosuid"} {
		if !slices.Contains(m.Options, o) {
			t.Errorf("ro bind options %v lack %s", m.Options, o)
		}
	}
	if s := mounted(t, stage); s.ReadOnly() {
		t.Errorf("staging mount became read-only: %+v", s)
	}

	table, err := Read()
	if err != nil {
		t.Fatal(err)
	}
	if got := table.OfDevice(dev.Major, dev.Minor); len(got) != 3 {
		t.Errorf("OfDevice = %+v, want staging mount and two binds", got)
	}
	if got := table.Under(dir); len(got) != 3 {
		t.Errorf("Under(%s) = %d mounts, want 3", dir, len(got))
	}
	for _, p := range []string{ro, rw, stage} {
		if err := Unmount(p); err != nil {
			t.Fatal(err)
		}
		notMounted(t, p)
	}
}

func TestBindBlockDevice(t *testing.T) {
	dir := scratch(t)
	dev := newDevice(t, dir, "")
	target := filepath.Join(dir, "block")
	if err := os.WriteFile(target, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Bind(dev.Path, target, true, []string{"nosuid"}); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(target, &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK || unix.Major(st.Rdev) != dev.Major || unix.Minor(st.Rdev) != dev.Minor {
		t.Errorf("target is mode %o rdev %d:%d, want block device %d:%d",
			st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev), dev.Major, dev.Minor)
	}
	if m := mounted(t, target); !m.ReadOnly() {
		t.Errorf("bind = %+v, want ro", m)
	}
	// A read-only mount does not stop writes to a device node on it (the
	// kernel exempts special files): read-only block volumes need a
	// read-only loop device. This documents that for the caller.
	if f, err := os.OpenFile(target, os.O_WRONLY, 0); err == nil {
		f.Close()
	} else {
		t.Logf("opening the device node for writing through a ro bind: %v", err)
	}
	for range 2 {
		if err := Unmount(target); err != nil {
			t.Fatal(err)
		}
	}
	notMounted(t, target)
}

func TestUnmountAll(t *testing.T) {
	dir := scratch(t)
	src := mkdir(t, filepath.Join(dir, "src"))
	target := mkdir(t, filepath.Join(dir, "target"))
	for range 3 {
		if err := Bind(src, target, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	table, err := Read()
	if err != nil {
		t.Fatal(err)
	}
	if n := len(table.At(target)); n != 3 {
		t.Fatalf("%d mounts stacked, want 3", n)
	}
	for range 2 {
		if err := UnmountAll(target); err != nil {
			t.Fatal(err)
		}
		notMounted(t, target)
	}
	if err := UnmountAll(filepath.Join(dir, "missing")); err != nil {
		t.Errorf("UnmountAll of a missing path = %v", err)
	}
}

// TestBtrfsDeviceNumbers documents for callers that btrfs mounts show an
// anonymous device number (0:N) in mountinfo, not the loop device's: find
// btrfs mounts of a device by Source, not with OfDevice.
func TestBtrfsDeviceNumbers(t *testing.T) {
	dir := scratch(t)
	dev := newDevice(t, dir, "mkfs.btrfs")
	stage := mkdir(t, filepath.Join(dir, "stage"))
	if err := Mount(dev.Path, stage, "btrfs", nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = UnmountAll(stage) })
	m := mounted(t, stage)
	if m.Source != dev.Path {
		t.Errorf("source = %q, want %q", m.Source, dev.Path)
	}
	if m.Major == dev.Major && m.Minor == dev.Minor {
		t.Logf("this kernel shows btrfs with the device's own number %d:%d", m.Major, m.Minor)
	} else {
		t.Logf("btrfs on %s (%d:%d) is listed as %d:%d", dev.Path, dev.Major, dev.Minor, m.Major, m.Minor)
	}
}

// TestReadSeesATableLongerThanOneRead: the kernel hands out mountinfo a
// page at a time, so a table of many mounts needs several reads. Every
// one of 120 binds (well over 4 KiB of lines) must be in the table, the
// last one made included.
func TestReadSeesATableLongerThanOneRead(t *testing.T) {
	dir := scratch(t)
	src := mkdir(t, filepath.Join(dir, "src"))
	var targets []string
	for i := range 120 {
		target := mkdir(t, filepath.Join(dir, "binds", "a-long-enough-name-to-fill-pages", strconv.Itoa(i)))
		if err := Bind(src, target, false, nil); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = UnmountAll(target) })
		targets = append(targets, target)
	}
	raw, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) <= 8<<10 {
		t.Fatalf("mountinfo is %d bytes: too short to need several reads", len(raw))
	}
	table, err := Read()
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range targets {
		if _, ok := table.Top(target); !ok {
			t.Fatalf("Read misses the bind at %s (%d of %d mounts seen, mountinfo %d bytes)",
				target, len(table), strings.Count(string(raw), "\n"), len(raw))
		}
	}
}
