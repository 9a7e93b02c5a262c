package fake

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/hostos/fs"
	"github.com/filevol/filevol/internal/hostos/loop"
)

// scene is an image file, a directory and a file to mount on.
func scene(t *testing.T) (h *Host, img, dir, file string) {
	t.Helper()
	tmp := t.TempDir()
	img, dir, file = filepath.Join(tmp, "a.img"), filepath.Join(tmp, "mnt"), filepath.Join(tmp, "node")
	if err := os.WriteFile(img, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return New(), img, dir, file
}

func TestLoopDevices(t *testing.T) {
	h, img, dir, _ := scene(t)
	ctx := context.Background()
	a, err := h.Attach(ctx, img, loop.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := h.Attach(ctx, img, loop.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if a.Path != "/dev/loop0" || b.Path != "/dev/loop1" || a.SizeBytes != 4096 || !b.ReadOnly || a.Major != 7 || b.Minor != 1 {
		t.Fatalf("attached %+v and %+v", a, b)
	}
	if _, err := h.Attach(ctx, filepath.Join(dir, "missing"), loop.Options{}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("attach of a missing file: %v", err)
	}
	if err := h.Format(ctx, b.Path, "ext4"); !errors.Is(err, unix.EROFS) {
		t.Errorf("mkfs on a read-only device: %v", err)
	}
	if err := h.Format(ctx, a.Path, "ext4"); err != nil {
		t.Fatal(err)
	}
	// The filesystem is in the file: the read-only device sees it too.
	if sig, err := h.Probe(ctx, b.Path); err != nil || sig != "ext4" {
		t.Errorf("probe of the other device: %q, %v", sig, err)
	}
	if err := h.Mount(a.Path, dir, "ext4", []string{"nosuid"}); err != nil {
		t.Fatal(err)
	}
	if err := h.Detach(a.Path); !errors.Is(err, loop.ErrBusy) {
		t.Errorf("detach of a mounted device: %v", err)
	}
	if err := h.UnmountAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := h.DetachFile(img); err != nil {
		t.Fatal(err)
	}
	if devs, _ := h.Find(img); len(devs) != 0 {
		t.Errorf("devices left: %v", devs)
	}
	if err := h.Detach(a.Path); err != nil {
		t.Errorf("detach of a detached device: %v", err)
	}
	if err := h.Detach("/dev/sda"); !errors.Is(err, loop.ErrNotFound) {
		t.Errorf("detach of a non-loop device: %v", err)
	}
	// Growing the file: the device keeps its size until SetCapacity.
	c, _ := h.Attach(ctx, img, loop.Options{})
	if err := os.Truncate(img, 8192); err != nil {
		t.Fatal(err)
	}
	if devs, _ := h.Find(img); devs[0].SizeBytes != 4096 {
		t.Errorf("device grew by itself: %+v", devs[0])
	}
	if n, err := h.SetCapacity(c.Path); err != nil || n != 8192 {
		t.Errorf("SetCapacity = %d, %v", n, err)
	}
	if err := os.Remove(img); err != nil {
		t.Fatal(err)
	}
	if devs, _ := h.Find(img); len(devs) != 1 || !devs[0].Deleted {
		t.Errorf("device of a deleted file: %+v", devs)
	}
}

func TestMountTable(t *testing.T) {
	h, img, dir, file := scene(t)
	ctx := context.Background()
	d, _ := h.Attach(ctx, img, loop.Options{})
	if err := h.Mount(d.Path, dir, "ext4", nil); !errors.Is(err, unix.EINVAL) {
		t.Errorf("mount of a device without a filesystem: %v", err)
	}
	h.SetSignature(img, "ext4", 4096)
	if err := h.Mount(d.Path, file, "ext4", nil); !errors.Is(err, unix.ENOTDIR) {
		t.Errorf("mount on a file: %v", err)
	}
	if err := h.Mount(d.Path, dir, "ext4", []string{"nosuid", "nodev", "discard"}); err != nil {
		t.Fatal(err)
	}
	// A bind of the mount: same device and superblock, the source's nosuid kept.
	bindDir := filepath.Join(filepath.Dir(dir), "bind")
	if err := os.Mkdir(bindDir, 0o700); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := h.Bind(sub, bindDir, true, nil); err != nil {
		t.Fatal(err)
	}
	// A bind of the device node: devtmpfs, root /loop0.
	if err := h.Bind(d.Path, file, false, nil); err != nil {
		t.Fatal(err)
	}
	table, _ := h.Table()
	m, _ := table.Top(dir)
	b, _ := table.Top(bindDir)
	n, _ := table.Top(file)
	if m.Major != 7 || m.Minor != 0 || m.Source != d.Path || m.SuperOptions[1] != "discard" {
		t.Errorf("mount %+v", m)
	}
	if b.Major != m.Major || b.Minor != m.Minor || b.Root != "/sub" || !b.ReadOnly() || b.Options[1] != "nosuid" {
		t.Errorf("bind of a directory in the mount %+v", b)
	}
	if n.FSType != "devtmpfs" || n.Root != "/loop0" {
		t.Errorf("bind of the device node %+v", n)
	}
	// The node's bind does not hold the device; the filesystem's mounts do.
	if err := h.UnmountAll(bindDir); err != nil {
		t.Fatal(err)
	}
	if err := h.UnmountAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := h.Detach(d.Path); err != nil {
		t.Errorf("detach under a node bind: %v", err)
	}
	if table, _ := h.Table(); len(table.At(file)) != 1 {
		t.Error("the node's bind went with the device")
	}
}

func TestUnmountBusy(t *testing.T) {
	h, _, dir, _ := scene(t)
	if err := h.MountAt(dir, "tmpfs", "tmpfs"); err != nil {
		t.Fatal(err)
	}
	inner := filepath.Join(dir, "inner")
	if err := os.Mkdir(inner, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := h.MountAt(inner, "tmpfs", "tmpfs"); err != nil {
		t.Fatal(err)
	}
	if err := h.UnmountAll(dir); !errors.Is(err, unix.EBUSY) {
		t.Errorf("unmount with a mount below: %v", err)
	}
	if err := h.UnmountAll(inner); err != nil {
		t.Fatal(err)
	}
	if err := h.UnmountAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := h.UnmountAll(dir); err != nil {
		t.Errorf("unmount of nothing: %v", err)
	}
}

func TestFreezeGrowAndFailures(t *testing.T) {
	h, img, dir, _ := scene(t)
	ctx := context.Background()
	d, _ := h.Attach(ctx, img, loop.Options{})
	h.SetSignature(img, "xfs", 2048)
	if err := h.Freeze(dir); !errors.Is(err, fs.ErrNotMountPoint) {
		t.Errorf("freeze of a plain directory: %v", err)
	}
	if err := h.Mount(d.Path, dir, "xfs", nil); err != nil {
		t.Fatal(err)
	}
	if err := h.Freeze(dir); err != nil {
		t.Fatal(err)
	}
	if err := h.Freeze(dir); !errors.Is(err, unix.EBUSY) || !h.Frozen(dir) {
		t.Errorf("second freeze: %v", err)
	}
	if err := h.Thaw(dir); err != nil || h.Frozen(dir) {
		t.Errorf("thaw: %v", err)
	}
	if err := h.Thaw(dir); err != nil {
		t.Errorf("thaw of a thawed filesystem: %v", err)
	}
	if err := h.GrowOffline(ctx, d.Path, "xfs", false); !errors.Is(err, fs.ErrInUse) {
		t.Errorf("offline growth while mounted: %v", err)
	}
	if err := h.Grow(ctx, d.Path, dir, "xfs"); err != nil {
		t.Fatal(err)
	}
	if n, err := h.Size(d.Path, "xfs"); err != nil || n != 4096 {
		t.Errorf("size after growth %d, %v", n, err)
	}
	boom := errors.New("boom")
	h.FailOnce("Table", boom)
	if _, err := h.Table(); !errors.Is(err, boom) {
		t.Errorf("injected: %v", err)
	}
	if _, err := h.Table(); err != nil {
		t.Errorf("FailOnce failed twice: %v", err)
	}
	if got := h.Log(); got[len(got)-2] != "table: boom" {
		t.Errorf("log %q", got)
	}
}

// A bind whose source is /proc/self/fd/N (how directory volumes are
// bound: through a descriptor opened beneath their pool) binds the
// directory the descriptor is open on: the mount shows the mount holding
// that directory, with the directory as its root, as the kernel's would.
func TestBindThroughDescriptor(t *testing.T) {
	h, _, pool, file := scene(t)
	if err := h.MountAt(pool, "tmpfs", "tmpfs"); err != nil {
		t.Fatal(err)
	}
	vol, target := filepath.Join(pool, "a", "vol"), filepath.Join(filepath.Dir(pool), "target")
	for _, d := range []string{vol, target} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Open(vol)
	if err != nil {
		t.Fatal(err)
	}
	src := fmt.Sprintf("/proc/self/fd/%d", f.Fd())
	err = h.Bind(src, target, true, []string{"nosuid", "nodev"})
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	table, _ := h.Table()
	held, _ := table.Top(pool)
	m, ok := table.Top(target)
	if !ok || m.Root != "/a/vol" || m.Major != held.Major || m.Minor != held.Minor || !m.ReadOnly() {
		t.Fatalf("bind through the descriptor: %+v (ok %v), want root /a/vol on %d:%d, read-only", m, ok, held.Major, held.Minor)
	}
	// A descriptor open on a file is bound on a file only.
	g, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := h.Bind(fmt.Sprintf("/proc/self/fd/%d", g.Fd()), vol, false, nil); !errors.Is(err, unix.ENOTDIR) {
		t.Errorf("bind of a file's descriptor on a directory: %v, want ENOTDIR", err)
	}
}
