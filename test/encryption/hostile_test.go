package encryption

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"

	"github.com/filevol/filevol/internal/hostos/fscrypt"
	"github.com/filevol/filevol/test/driver"
)

// tamper mounts the unstaged volume's image without its key, as root on
// the node (or anyone who can write the pool) would, runs change on the
// mount, and unmounts it.
func (e *env) tamper(id string, change func(root string)) {
	e.t.Helper()
	mnt := filepath.Join(e.dir, "tamper")
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		e.t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "ext4", "-o", "loop", e.d.Pool.ImagePath(id), mnt).CombinedOutput(); err != nil {
		e.t.Fatalf("mount the image: %v: %s", err, out)
	}
	defer func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			e.t.Fatalf("umount the image: %v: %s", err, out)
		}
	}()
	change(mnt)
}

// refusedClean checks that a stage was refused, saying what it found,
// and left no mount, loop device or key behind.
func (e *env) refusedClean(what string, err error, says ...string) {
	e.t.Helper()
	wantCode(e.t, what, err, codes.FailedPrecondition, says...)
	if m := driver.Mounts(e.t, e.dir); len(m) != 0 {
		e.t.Errorf("%s: mounts left: %v", what, m)
	}
	if l := driver.Loops(e.t, e.dir); len(l) != 0 {
		e.t.Errorf("%s: loop devices left: %v", what, l)
	}
}

// The encrypted tree replaced behind filevol's back: data/ made a symlink
// out of the volume, or a directory in clear holding files. The stage
// follows no link, encrypts nothing that already holds data in clear,
// says what it found and leaves nothing; put back, the volume opens with
// its marker.
func TestTamperedEncryptedDirectory(t *testing.T) {
	e := start(t)
	id := e.mustCreate("tampered", encParams, nil)
	m := marker(t)
	if err := os.WriteFile(filepath.Join(e.up(id, oldKey), "m"), []byte(m), 0o644); err != nil {
		t.Fatal(err)
	}
	e.down(id)

	outside := filepath.Join(e.dir, "outside")
	if err := os.Mkdir(outside, 0o700); err != nil {
		t.Fatal(err)
	}
	e.tamper(id, func(root string) {
		if err := os.Rename(filepath.Join(root, "data"), filepath.Join(root, "kept")); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(outside, filepath.Join(root, "data")); err != nil {
			t.Fatal(err)
		}
	})
	e.refusedClean("data/ a symlink out of the volume", e.stage(id, oldKey), "is a symbolic link", "follows no link")
	if _, ok, err := (fscrypt.OS{}).Policy(outside); ok || (err != nil && !errors.Is(err, fscrypt.ErrNotSupported)) {
		t.Errorf("the directory the link named was encrypted (%v, %v)", ok, err)
	}

	clear := "in-clear-" + marker(t)
	e.tamper(id, func(root string) {
		if err := os.Remove(filepath.Join(root, "data")); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(filepath.Join(root, "data"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "data", "f"), []byte(clear), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	e.refusedClean("data/ a directory in clear with a file", e.stage(id, oldKey), "holds files in clear", "never rewrites")

	e.tamper(id, func(root string) {
		if err := os.RemoveAll(filepath.Join(root, "data")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(root, "kept"), filepath.Join(root, "data")); err != nil {
			t.Fatal(err)
		}
	})
	if got, err := os.ReadFile(filepath.Join(e.up(id, oldKey), "m")); err != nil || string(got) != m {
		t.Errorf("the marker once data/ is back: %q, %v", got, err)
	}
	e.down(id)
}

// What a pod can do inside the encrypted tree: replace a subdirectory
// with a symlink out of the volume, or with a new directory (which the
// kernel encrypts like every other made there). A directory in clear
// cannot be moved in, even by root through the staging path (the kernel
// refuses: EXDEV). Unstage and stage follow nothing inside data/, and the
// image holds neither the names nor the link targets in clear.
func TestPodReplacesInsideEncryptedTree(t *testing.T) {
	e := start(t)
	id := e.mustCreate("pod-games", encParams, nil)
	target := e.up(id, oldKey)
	sub := filepath.Join(target, "sub")
	if err := os.MkdirAll(filepath.Join(sub, "deeper"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(sub); err != nil {
		t.Fatal(err)
	}
	escape := "/etc/" + marker(t)
	if err := os.Symlink(escape, sub); err != nil {
		t.Fatal(err)
	}
	name := "replaced-" + marker(t)
	if err := os.Mkdir(filepath.Join(target, name), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := (fscrypt.OS{}).Policy(filepath.Join(target, name)); !ok || err != nil {
		t.Errorf("a directory the pod made is not encrypted (%v, %v)", ok, err)
	}
	// The one directory in clear on the volume's filesystem is at its
	// root, out of the pod's sight; root cannot move it in either.
	plain := filepath.Join(e.staging(id), "lost+found", "plain")
	if err := os.Mkdir(plain, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(plain, filepath.Join(target, "moved-in")); !errors.Is(err, unix.EXDEV) {
		t.Errorf("moving a directory in clear into the encrypted tree: %v, want EXDEV", err)
	}
	if err := os.Remove(plain); err != nil {
		t.Fatal(err)
	}
	e.down(id)
	img := e.image(id)
	if bytes.Contains(img, []byte(escape)) || bytes.Contains(img, []byte(name)) {
		t.Error("the image holds the pod's link target or directory name in clear")
	}
	target = e.up(id, oldKey)
	if got, err := os.Readlink(sub); err != nil || got != escape {
		t.Errorf("the pod's link after a stage: %q, %v", got, err)
	}
	e.down(id)
}

// data/ replaced by a symlink on the node while the volume is staged: the
// unstage cannot read which key to remove without following the link, so
// it refuses, says so, and unmounts nothing (an unmount could leave the
// key alive in another namespace's copy of the mount). Put back, the
// unstage removes the key.
func TestUnstageWithDataReplacedByALink(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	id := e.mustCreate("relinked", encParams, nil)
	if err := os.WriteFile(filepath.Join(e.up(id, oldKey), "m"), []byte(marker(t)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := e.d.Node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: e.target(id)}); err != nil {
		t.Fatal(err)
	}
	staging := e.staging(id)
	keyID, ok, err := fscrypt.OS{}.Policy(filepath.Join(staging, "data"))
	if err != nil || !ok {
		t.Fatalf("policy of data/: %v, %v", ok, err)
	}
	if err := os.Rename(filepath.Join(staging, "data"), filepath.Join(staging, "kept")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("kept", filepath.Join(staging, "data")); err != nil {
		t.Fatal(err)
	}
	_, err = e.d.Node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging})
	wantCode(t, "unstage with data/ a link", err, codes.FailedPrecondition, "is a symbolic link", "put the directory back")
	if s, err := (fscrypt.OS{}).Status(staging, keyID); err != nil || s != fscrypt.Present {
		t.Fatalf("after the refused unstage the key is %v (%v), want present with its mount", s, err)
	}
	if err := os.Remove(filepath.Join(staging, "data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(staging, "kept"), filepath.Join(staging, "data")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.d.Node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
		t.Fatalf("unstage once data/ is back: %v", err)
	}
}
