package imagenode

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"

	"github.com/filevol/filevol/internal/hostos"
	"github.com/filevol/filevol/internal/hostos/fake"
	"github.com/filevol/filevol/internal/hostos/fs"
	"github.com/filevol/filevol/internal/inuse"
	"github.com/filevol/filevol/internal/volume"
)

// The node half's own paths that the node service's tests on the fake
// (internal/csi, node_*_test.go) do not reach: the interrupted format and
// growth markers, growth refused while the filesystem is in use, what the
// in-use reconcile reads of a staged volume, and refusals at the edges.

// fakeEnv is env on the fake kernel k.
type fakeEnv struct {
	*env
	k *fake.Host
}

func newFakeEnv(t *testing.T) *fakeEnv {
	t.Helper()
	k := fake.New()
	return &fakeEnv{env: newEnv(t, t.TempDir(), func(string) hostos.Host { return k.Host() }), k: k}
}

// What the in-use reconcile reads of a staged volume (StagedEntry): the
// staging path of a mount volume and whether its device is read-only; the
// staging path of a block volume (the directory of its device's bind);
// nothing for a volume not staged.
func TestStagedEntryDescribesTheStage(t *testing.T) {
	e := newFakeEnv(t)
	ctx := context.Background()
	fsVol, blockVol := e.committed("fs", "ext4", 64<<20), e.committed("block", "ext4", 64<<20)
	if _, ok, err := e.node.StagedEntry(fsVol); ok || err != nil {
		t.Fatalf("entry of a volume not staged: %v, %v", ok, err)
	}
	staging := e.path("fs/globalmount")
	e.mustStage(fsVol, staging, false, false)
	if got, ok, err := e.node.StagedEntry(fsVol); !ok || err != nil || got != (inuse.Entry{VolumeID: fsVol, StagingPath: staging}) {
		t.Errorf("entry of a staged mount volume: %+v, %v, %v", got, ok, err)
	}
	if err := e.node.Unstage(ctx, fsVol, staging); err != nil {
		t.Fatal(err)
	}
	// Staged again read-only: its filesystem was made by the first stage.
	e.mustStage(fsVol, staging, false, true)
	if got, ok, err := e.node.StagedEntry(fsVol); !ok || err != nil || !got.ReadOnly || got.StagingPath != staging {
		t.Errorf("entry of a read-only staged volume: %+v, %v, %v", got, ok, err)
	}
	blockStaging := e.path("block/globalmount")
	e.mustStage(blockVol, blockStaging, true, false)
	if got, ok, err := e.node.StagedEntry(blockVol); !ok || err != nil || got != (inuse.Entry{VolumeID: blockVol, StagingPath: blockStaging, Block: true}) {
		t.Errorf("entry of a staged block volume: %+v, %v, %v", got, ok, err)
	}
}

// An image file gone from under its record is FAILED_PRECONDITION at
// stage, with nothing attached; the same at a node-side expansion.
func TestStageOfAMissingImage(t *testing.T) {
	e := newFakeEnv(t)
	id := e.committed("a", "ext4", 64<<20)
	if err := os.Remove(e.pool.ImagePath(id)); err != nil {
		t.Fatal(err)
	}
	wantCoded(t, "stage without its image", e.stage(id, e.path("a/globalmount"), false, false), codes.FailedPrecondition)
	if n := e.k.Calls("attach"); n != 0 {
		t.Errorf("%d attaches: %v", n, e.k.Log())
	}
	_, err := e.node.Expand(context.Background(), e.get(id), volume.ExpandRequest{VolumePath: e.path("a/globalmount"), RequiredBytes: 128 << 20})
	wantCoded(t, "expand without its image", err, codes.FailedPrecondition)
}

// A growth the node cannot make within limit_bytes (the filesystem's
// minimum growth rounds it past it) is OUT_OF_RANGE, and the image keeps
// its size.
func TestNodeExpansionPastTheLimitIsOutOfRange(t *testing.T) {
	e := newFakeEnv(t)
	id := e.committed("a", "xfs", 512<<20)
	staging := e.path("a/globalmount")
	e.mustStage(id, staging, false, false)
	req := int64(512<<20) + 4096
	if want := fs.GrowTarget("xfs", 512<<20, volume.RoundUp(req), req); want <= req {
		t.Skipf("xfs's growth target %d is within the limit %d: nothing to refuse", want, req)
	}
	_, err := e.node.Expand(context.Background(), e.get(id), volume.ExpandRequest{VolumePath: staging, StagingPath: staging, RequiredBytes: req, LimitBytes: req})
	wantCoded(t, "expand past limit_bytes", err, codes.OutOfRange)
	if st, err := os.Stat(e.pool.ImagePath(id)); err != nil || st.Size() != 512<<20 {
		t.Errorf("image after the refusal: %v, %v", st, err)
	}
}

// A format that died half-way (its marker still set) left a signature
// that is no data: the next stage formats again and clears the marker.
// Without the marker the same signature is kept (TestNodeStageKeepsExistingFilesystem).
func TestInterruptedFormatIsMadeAgain(t *testing.T) {
	e := newFakeEnv(t)
	id := e.committed("a", "ext4", 64<<20)
	e.k.SetSignature(e.pool.ImagePath(id), "ext4", 4096)
	if err := e.pool.NodeState().Format.Set(id); err != nil {
		t.Fatal(err)
	}
	e.mustStage(id, e.path("a/globalmount"), false, false)
	if n := e.k.Calls("format"); n != 1 {
		t.Errorf("%d formats: %v", n, e.k.Log())
	}
	if _, size := e.k.Signature(e.pool.ImagePath(id)); size != 64<<20 {
		t.Errorf("filesystem of %d bytes after the format, want the device's", size)
	}
	if e.pool.NodeState().Format.IsSet(id) {
		t.Error("the format marker is still set")
	}
}

// An offline growth that died half-way (its marker set) is repaired and
// made again at the next stage, even when the superblock already shows
// the full size, and the marker is cleared.
func TestInterruptedGrowthIsRepaired(t *testing.T) {
	e := newFakeEnv(t)
	id := e.committed("a", "ext4", 64<<20)
	e.k.SetSignature(e.pool.ImagePath(id), "ext4", 64<<20)
	if err := e.pool.NodeState().Grow.Set(id); err != nil {
		t.Fatal(err)
	}
	e.mustStage(id, e.path("a/globalmount"), false, false)
	if !slices.Contains(e.k.Log(), "grow-offline /dev/loop0 ext4 repair=true") {
		t.Errorf("no repairing growth: %v", e.k.Log())
	}
	if e.pool.NodeState().Grow.IsSet(id) {
		t.Error("the growth marker is still set")
	}
}

// An ext4 behind its device whose filesystem is in use (mounted at
// another staging path, or held: resize2fs says in use) is staged as it
// is; the growth waits for a stage that finds it free. A growth marker
// that was set before stays for that stage.
func TestGrowthWaitsWhileTheFilesystemIsInUse(t *testing.T) {
	t.Run("mounted elsewhere", func(t *testing.T) {
		e := newFakeEnv(t)
		id := e.committed("a", "ext4", 64<<20)
		e.mustStage(id, e.path("a/globalmount"), false, false)
		e.k.SetSignature(e.pool.ImagePath(id), "ext4", 32<<20) // expanded while staged
		e.mustStage(id, e.path("a/moved"), false, false)
		if n := e.k.Calls("grow-offline"); n != 0 {
			t.Errorf("grown offline while mounted: %v", e.k.Log())
		}
	})
	for _, interrupted := range []bool{false, true} {
		name := map[bool]string{false: "in use", true: "in use after an interrupted growth"}[interrupted]
		t.Run(name, func(t *testing.T) {
			e := newFakeEnv(t)
			id := e.committed("a", "ext4", 64<<20)
			e.k.SetSignature(e.pool.ImagePath(id), "ext4", 32<<20)
			if interrupted {
				if err := e.pool.NodeState().Grow.Set(id); err != nil {
					t.Fatal(err)
				}
			}
			e.k.FailOnce("GrowOffline", fs.ErrInUse)
			e.mustStage(id, e.path("a/globalmount"), false, false)
			if _, size := e.k.Signature(e.pool.ImagePath(id)); size != 32<<20 {
				t.Errorf("filesystem of %d bytes, want it untouched", size)
			}
			if got := e.pool.NodeState().Grow.IsSet(id); got != interrupted {
				t.Errorf("growth marker set: %v, want %v", got, interrupted)
			}
		})
	}
}

// A block staging path whose device path holds another volume's device
// is ALREADY_EXISTS, and the device this stage attached goes again.
func TestBlockStageOnAnotherDeviceIsAlreadyExists(t *testing.T) {
	e := newFakeEnv(t)
	a, b := e.committed("a", "ext4", 64<<20), e.committed("b", "ext4", 64<<20)
	staging := e.path("shared/globalmount")
	e.mustStage(a, staging, true, false)
	wantCoded(t, "block stage over another volume's device", e.stage(b, staging, true, false), codes.AlreadyExists)
	if devs, _ := e.k.Find(e.pool.ImagePath(b)); len(devs) != 0 {
		t.Errorf("the refused stage left %v attached", devs)
	}
}

// A block target that is a directory (some COs make one) is replaced by
// the file the device is bound on; one that holds files is refused.
func TestBlockPublishOnADirectory(t *testing.T) {
	e := newFakeEnv(t)
	id := e.committed("a", "ext4", 64<<20)
	staging := e.path("a/globalmount")
	e.mustStage(id, staging, true, false)
	publish := func(target string) error {
		return e.node.Publish(context.Background(), e.get(id), volume.PublishRequest{StagingPath: staging, TargetPath: target, Block: true})
	}
	empty, full := e.path("pod/empty"), e.path("pod/full")
	for _, d := range []string{empty, full} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(full, "data"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := publish(empty); err != nil {
		t.Fatalf("publish on an empty directory: %v", err)
	}
	if st, err := os.Lstat(empty); err != nil || !st.Mode().IsRegular() {
		t.Errorf("target after the publish: %v, %v, want a file", st, err)
	}
	wantCoded(t, "publish on a directory with files", publish(full), codes.FailedPrecondition)
	if _, err := os.Stat(filepath.Join(full, "data")); err != nil {
		t.Errorf("the directory's file: %v", err)
	}
}

// An unmount that fails leaves the target (and its mount) for the CO's
// retry; a target never published, on a volume with no device, is success.
func TestUnpublishFailuresAndNothingToDo(t *testing.T) {
	e := newFakeEnv(t)
	ctx := context.Background()
	id := e.committed("a", "ext4", 64<<20)
	if err := e.node.Unpublish(ctx, id, e.path("pod/never")); err != nil {
		t.Errorf("unpublish of a target never published: %v", err)
	}
	staging, target := e.path("a/globalmount"), e.path("pod/mount")
	e.mustStage(id, staging, false, false)
	if err := e.node.Publish(ctx, e.get(id), volume.PublishRequest{StagingPath: staging, TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	e.k.FailOnce("UnmountAll", unix.EBUSY)
	if err := e.node.Unpublish(ctx, id, target); !errors.Is(err, unix.EBUSY) {
		t.Fatalf("unpublish with a failing unmount: %v", err)
	}
	if _, err := os.Stat(target); err != nil {
		t.Errorf("the target was removed: %v", err)
	}
	if err := e.node.Unpublish(ctx, id, target); err != nil {
		t.Fatalf("the retry: %v", err)
	}
	if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("target after the retry: %v", err)
	}
}
