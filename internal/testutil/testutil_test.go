package testutil_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/testutil"
)

const scratchName = "testutil"

// TestCleanLeftovers builds what a killed test run leaves behind — nested
// and stacked mounts, a loop device backed by a file on a tmpfs inside the
// tree (which keeps that tmpfs busy), an ext4 on a loop device mounted in
// the tree — and checks that CleanLeftovers removes all of it.
func TestCleanLeftovers(t *testing.T) {
	testutil.RequireRoot(t)
	root := testutil.Scratch(t, scratchName)
	mkdir := func(p string) string {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	mount := func(src, dst, fstype string) {
		if err := unix.Mount(src, dst, fstype, 0, ""); err != nil {
			t.Fatalf("mount %s on %s: %v", src, dst, err)
		}
	}
	a := mkdir(filepath.Join(root, "a"))
	mount("tmpfs", a, "tmpfs")
	b := mkdir(filepath.Join(a, "b"))
	mount("tmpfs", b, "tmpfs")
	mount("tmpfs", b, "tmpfs") // stacked

	onTmpfs := filepath.Join(a, "testutil-on-tmpfs.img")
	fsImg := filepath.Join(root, "testutil-fs.img")
	for _, p := range []string{onTmpfs, fsImg} {
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(p, 16<<20); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command("mkfs.ext4", "-F", "-q", fsImg).CombinedOutput(); err != nil {
		t.Skipf("mkfs.ext4: %v: %s", err, out)
	}
	var devs []loop.Device
	for _, p := range []string{onTmpfs, onTmpfs, fsImg} {
		d, err := loop.Attach(t.Context(), p, loop.Options{DirectIO: true})
		if err != nil {
			t.Fatal(err)
		}
		devs = append(devs, d)
	}
	mount(devs[2].Path, mkdir(filepath.Join(b, "ext4")), "ext4")

	if err := testutil.CleanLeftovers(root); err != nil {
		t.Fatalf("CleanLeftovers: %v", err)
	}

	mounts, err := mountinfo.GetMounts(func(m *mountinfo.Info) (bool, bool) {
		return m.Mountpoint != root && !strings.HasPrefix(m.Mountpoint, root+"/"), false
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mounts {
		t.Errorf("still mounted: %s (%s)", m.Mountpoint, m.FSType)
	}
	all, err := loop.List()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range all {
		if strings.HasPrefix(d.BackingFile, root+"/") {
			t.Errorf("still attached: %s → %s", d.Path, d.BackingFile)
		}
		// A device whose tmpfs was unmounted lazily would still be
		// attached, reporting a path relative to the detached mount. (Match
		// exactly: other test processes attach devices concurrently.)
		for _, mine := range devs[:2] {
			if d.Number == mine.Number && d.BackingFile == "/"+filepath.Base(onTmpfs) {
				t.Errorf("leaked: %s → %s", d.Path, d.BackingFile)
			}
		}
	}
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Errorf("%s still exists (stat: %v)", root, err)
	}
}

func TestCleanLeftoversRefuses(t *testing.T) {
	for _, p := range []string{"/", "relative/dir", "", "/tmp/../"} {
		if err := testutil.CleanLeftovers(p); err == nil {
			t.Errorf("CleanLeftovers(%q): want a refusal", p)
		}
	}
	if err := testutil.CleanLeftovers(filepath.Join(testutil.Base, scratchName, "never-created")); err != nil {
		t.Errorf("CleanLeftovers(missing): %v", err)
	}
}

func TestScratch(t *testing.T) {
	a := testutil.Scratch(t, scratchName)
	b := testutil.Scratch(t, scratchName)
	if a == b {
		t.Errorf("two Scratch calls returned the same directory %s", a)
	}
	for _, d := range []string{a, b} {
		if filepath.Dir(d) != filepath.Join(testutil.Base, scratchName) {
			t.Errorf("Scratch = %s, want a directory in %s/%s", d, testutil.Base, scratchName)
		}
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			t.Errorf("Scratch dir %s: %v", d, err)
		}
	}
	t.Run("cleanup", func(t *testing.T) {
		sub := testutil.Scratch(t, scratchName)
		if err := os.WriteFile(filepath.Join(sub, "f"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			// Registered after Scratch's cleanup, so it runs first.
			if _, err := os.Stat(sub); err != nil {
				t.Errorf("removed too early: %v", err)
			}
		})
		a = sub
	})
	if _, err := os.Stat(a); !os.IsNotExist(err) {
		t.Errorf("subtest scratch %s survives its test (stat: %v)", a, err)
	}
}

// TestCleanLeftoversAfterALazyUnmount: what a run whose own cleanup gave up
// half-way leaves: a pool filesystem on a loop device, unmounted lazily
// while a volume's loop device, backed by an image in it, stayed attached.
// That volume's backing path no longer resolves under root ("/vol.img"),
// yet it keeps the pool filesystem, and so the pool's device, busy; every
// later run of the package failed to detach the pool's device.
func TestCleanLeftoversAfterALazyUnmount(t *testing.T) {
	testutil.RequireRoot(t)
	root := testutil.Scratch(t, scratchName)
	poolImg := filepath.Join(root, "testutil-pool.img")
	if err := os.WriteFile(poolImg, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(poolImg, 64<<20); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.ext4", "-F", "-q", poolImg).CombinedOutput(); err != nil {
		t.Skipf("mkfs.ext4: %v: %s", err, out)
	}
	poolDev, err := loop.Attach(t.Context(), poolImg, loop.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pool := filepath.Join(root, "pool")
	if err := os.MkdirAll(pool, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(poolDev.Path, pool, "ext4", 0, ""); err != nil {
		t.Fatal(err)
	}
	volImg := filepath.Join(pool, "testutil-vol.img")
	if err := os.WriteFile(volImg, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	volDev, err := loop.Attach(t.Context(), volImg, loop.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Unmount(pool, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}

	if err := testutil.CleanLeftovers(root); err != nil {
		t.Errorf("CleanLeftovers: %v", err)
	}
	all, err := loop.List()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range all {
		if (d.Number == volDev.Number && d.BackingFile == "/testutil-vol.img") ||
			(d.Number == poolDev.Number && strings.HasSuffix(d.BackingFile, "testutil-pool.img")) {
			t.Errorf("leaked: %s → %s", d.Path, d.BackingFile)
		}
	}
	if t.Failed() { // the volume's device first: it holds the pool's
		_ = loop.Detach(volDev.Path)
		_ = loop.Detach(poolDev.Path)
	}
}
