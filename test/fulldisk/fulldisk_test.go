// Package fulldisk runs filevol on a pool that fills up: the pool directory is a small ext4 filesystem the test makes
// (a 256 MiB image file on a loop device, mounted at <scratch>/pool), so
// running out of space is quick and touches nothing else on the machine.
//
// It shows that creating beyond the pool's capacity is RESOURCE_EXHAUSTED
// and leaves nothing behind; that thick volumes are really reserved (the
// pool's free space drops by their size, and they stay writable when thin
// volumes have used up everything else); and that a thin, overcommitted
// pool running out while a pod writes surfaces the error to the writer
// without corrupting other volumes, with NodeGetStorageHealth reporting
// PoolNearlyFull and NodeGetVolumeHealth what it sees of the writer's
// volume.
//
// Needs root (loop devices, mounts); skipped otherwise.
package fulldisk

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/filevol/filevol/internal/hostos/fs"
	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/hostos/mount"
	"github.com/filevol/filevol/internal/inuse"
	"github.com/filevol/filevol/internal/testutil"
	"github.com/filevol/filevol/test/driver"
)

const (
	poolFSSize = 256 << 20
	mib        = 1 << 20
)

// smallPool makes a poolFSSize ext4 filesystem (no root-reserved blocks,
// so the pool's free space is all of it) mounted at dir/pool.
func smallPool(t *testing.T, dir string) {
	t.Helper()
	img := filepath.Join(dir, "poolfs.img")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(poolFSSize); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-m", "0", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v\n%s", err, out)
	}
	dev, err := loop.Attach(context.Background(), img, loop.Options{})
	if err != nil {
		t.Fatal(err)
	}
	mp := filepath.Join(dir, "pool")
	if err := os.MkdirAll(mp, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := mount.Mount(dev.Path, mp, "ext4", nil); err != nil {
		_ = loop.Detach(dev.Path)
		t.Fatal(err)
	}
	// testutil.Scratch's cleanup unmounts and detaches whatever is left
	// (volumes first, then this filesystem), also after a failed run.
}

// vol is a volume under test.
type vol struct {
	name, id        string
	staging, target string
	cap             *csipb.VolumeCapability
	data            []byte // acknowledged contents of target/data
}

func newVol(dir, name string) *vol {
	return &vol{
		name:    name,
		staging: filepath.Join(dir, "plugins", name, "globalmount"),
		target:  filepath.Join(dir, "pods", name, "volume"),
		cap: &csipb.VolumeCapability{
			AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
			AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{FsType: "ext4"}},
		},
	}
}

type harness struct {
	t   *testing.T
	d   *driver.Driver
	dir string
	ctx context.Context
}

func (h *harness) create(v *vol, size int64, provisioning string) error {
	resp, err := h.d.Controller.CreateVolume(h.ctx, &csipb.CreateVolumeRequest{
		Name: v.name, VolumeCapabilities: []*csipb.VolumeCapability{v.cap},
		CapacityRange: &csipb.CapacityRange{RequiredBytes: size},
		Parameters:    map[string]string{"provisioning": provisioning},
	})
	if err == nil {
		v.id = resp.GetVolume().GetVolumeId()
	}
	return err
}

func (h *harness) mustCreate(v *vol, size int64, provisioning string) {
	h.t.Helper()
	if err := h.create(v, size, provisioning); err != nil {
		h.t.Fatalf("create %s (%d MiB %s): %v", v.name, size/mib, provisioning, err)
	}
}

func (h *harness) stageAndPublish(v *vol) {
	h.t.Helper()
	if _, err := h.d.Node.NodeStageVolume(h.ctx, &csipb.NodeStageVolumeRequest{VolumeId: v.id, StagingTargetPath: v.staging, VolumeCapability: v.cap}); err != nil {
		h.t.Fatalf("stage %s: %v", v.name, err)
	}
	if _, err := h.d.Node.NodePublishVolume(h.ctx, &csipb.NodePublishVolumeRequest{VolumeId: v.id, StagingTargetPath: v.staging, TargetPath: v.target, VolumeCapability: v.cap}); err != nil {
		h.t.Fatalf("publish %s: %v", v.name, err)
	}
}

func (h *harness) unpublishAndUnstage(v *vol) {
	h.t.Helper()
	if _, err := h.d.Node.NodeUnpublishVolume(h.ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: v.id, TargetPath: v.target}); err != nil {
		h.t.Fatalf("unpublish %s: %v", v.name, err)
	}
	if _, err := h.d.Node.NodeUnstageVolume(h.ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: v.id, StagingTargetPath: v.staging}); err != nil {
		h.t.Fatalf("unstage %s: %v", v.name, err)
	}
}

func (h *harness) delete(v *vol) {
	h.t.Helper()
	if _, err := h.d.Controller.DeleteVolume(h.ctx, &csipb.DeleteVolumeRequest{VolumeId: v.id}); err != nil {
		h.t.Fatalf("delete %s: %v", v.name, err)
	}
}

// available is GetCapacity's answer.
func (h *harness) available() int64 {
	h.t.Helper()
	resp, err := h.d.Controller.GetCapacity(h.ctx, &csipb.GetCapacityRequest{
		VolumeCapabilities: []*csipb.VolumeCapability{newVol(h.dir, "x").cap},
		Parameters:         map[string]string{"provisioning": "thin"},
	})
	if err != nil {
		h.t.Fatalf("GetCapacity: %v", err)
	}
	return resp.GetAvailableCapacity()
}

// free is statfs of the pool filesystem: bytes available.
func (h *harness) free() int64 {
	h.t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(h.d.PoolDir, &st); err != nil {
		h.t.Fatal(err)
	}
	return int64(st.Bavail) * st.Bsize
}

// poolFiles lists the files in the pool (relative paths), but the lock.
func (h *harness) poolFiles() []string {
	h.t.Helper()
	var out []string
	err := filepath.Walk(h.d.PoolDir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(h.d.PoolDir, p)
		if fi.IsDir() && rel == "lost+found" {
			return filepath.SkipDir
		}
		if !fi.IsDir() && rel != ".lock" && rel != "pool.json" { // the lock and the pool's identity
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return out
}

// expectFiles fails unless the pool holds exactly the image and record of
// each of vols, besides what a staged volume and a controller that asked
// for a freeze keep there: the node's in-use record of each of vols, and
// the controller's freeze owner lock.
func (h *harness) expectFiles(when string, vols ...*vol) {
	h.t.Helper()
	want, may := map[string]bool{}, map[string]bool{}
	for _, v := range vols {
		want["volumes/"+v.id+".img"], want["volumes/"+v.id+".json"] = true, true
		may["inuse/"+v.id+"@"+inuse.NodeKey(driver.NodeID)+".json"] = true
	}
	got := h.poolFiles()
	for _, f := range got {
		if !want[f] && !may[f] && !strings.HasPrefix(f, "freeze/.owner-") {
			h.t.Errorf("%s: left behind in the pool: %s", when, f)
		}
		delete(want, f)
	}
	for f := range want {
		h.t.Errorf("%s: missing from the pool: %s", when, f)
	}
}

func TestFullDisk(t *testing.T) {
	testutil.RequireRoot(t)
	dir := testutil.Scratch(t, "fulldisk")
	smallPool(t, dir)
	d := driver.Start(t, dir)
	// driver.Stop leaves the pool open, and its descriptors would keep the
	// pool filesystem (and its loop device) busy after the unmount.
	t.Cleanup(func() {
		d.Stop(t)
		_ = d.Pool.Close()
	})
	h := &harness{t: t, d: d, dir: dir, ctx: context.Background()}
	t.Logf("pool: %d MiB ext4, %d MiB free, GetCapacity %d MiB", poolFSSize/mib, h.free()/mib, h.available()/mib)

	t.Run("BeyondCapacity", h.beyondCapacity)
	t.Run("ThickIsReserved", h.thickIsReserved)
	t.Run("ThinOvercommitRunsOut", h.thinRunsOut)
}

// beyondCapacity: a volume larger than the pool can hold, thin or thick,
// is RESOURCE_EXHAUSTED and leaves no file; a thick volume that just fits
// by statfs but not once the filesystem's own metadata is counted either
// succeeds or is RESOURCE_EXHAUSTED, again leaving nothing.
func (h *harness) beyondCapacity(t *testing.T) {
	h.t = t
	avail := h.available()
	for _, prov := range []string{"thin", "thick"} {
		v := newVol(h.dir, "too-big-"+prov)
		err := h.create(v, avail+64*mib, prov)
		if status.Code(err) != codes.ResourceExhausted {
			t.Errorf("%s volume of %d MiB with %d MiB available: %v, want RESOURCE_EXHAUSTED", prov, (avail+64*mib)/mib, avail/mib, err)
		} else {
			t.Logf("%s, %d MiB > %d MiB available: %v", prov, (avail+64*mib)/mib, avail/mib, err)
		}
		h.expectFiles(prov + " create beyond capacity")
	}
	// Exactly what GetCapacity says is available, fallocated: ext4 needs
	// extent blocks besides the data, so this may not fit after all.
	v := newVol(h.dir, "just-fits-thick")
	err := h.create(v, avail/mib*mib, "thick")
	switch status.Code(err) {
	case codes.OK:
		t.Logf("thick volume of all %d MiB available: created", avail/mib)
		h.expectFiles("thick create of all available", v)
		h.delete(v)
	case codes.ResourceExhausted:
		t.Logf("thick volume of all %d MiB available: %v", avail/mib, err)
	default:
		t.Errorf("thick volume of all %d MiB available: %v, want success or RESOURCE_EXHAUSTED", avail/mib, err)
	}
	h.expectFiles("after the thick create of all available")
}

// thickIsReserved: fallocate really takes the space: the filesystem's free
// space and GetCapacity drop by the volume's size, and come back on delete.
func (h *harness) thickIsReserved(t *testing.T) {
	h.t = t
	const size = 64 * mib
	freeBefore, availBefore := h.free(), h.available()
	v := newVol(h.dir, "thick-64")
	h.mustCreate(v, size, "thick")
	freeAfter, availAfter := h.free(), h.available()
	t.Logf("thick %d MiB: statfs free %d → %d MiB, GetCapacity %d → %d MiB",
		size/mib, freeBefore/mib, freeAfter/mib, availBefore/mib, availAfter/mib)
	if drop := freeBefore - freeAfter; drop < size {
		t.Errorf("free space dropped by %d bytes for a %d byte thick volume", drop, size)
	}
	if drop := availBefore - availAfter; drop < size {
		t.Errorf("GetCapacity dropped by %d bytes for a %d byte thick volume", drop, size)
	}
	thin := newVol(h.dir, "thin-64")
	h.mustCreate(thin, size, "thin")
	if drop := freeAfter - h.free(); drop > 1*mib {
		t.Errorf("a thin volume took %d bytes up front", drop)
	}
	h.delete(thin)
	h.delete(v)
	if back := h.free(); back < freeBefore-mib {
		t.Errorf("free space %d MiB after delete, %d MiB before create", back/mib, freeBefore/mib)
	}
	h.expectFiles("after deleting the thick volume")
}

// thinRunsOut: a thick volume, a thin victim with checksummed data, and
// two thin writers that together promise far more than the pool holds;
// the writers fill their volumes until the pool is full.
func (h *harness) thinRunsOut(t *testing.T) {
	h.t = t
	thick, victim := newVol(h.dir, "reserved"), newVol(h.dir, "victim")
	h.mustCreate(thick, 48*mib, "thick")
	h.mustCreate(victim, 64*mib, "thin")
	for _, v := range []*vol{thick, victim} {
		h.stageAndPublish(v)
	}
	writeData(t, victim, 16*mib, 1)
	writeData(t, thick, 4*mib, 2)
	// Each writer alone fits (a single volume larger than the pool is
	// refused); together they overcommit the pool twice over.
	writerSize := h.available() / mib * mib
	writers := []*vol{newVol(h.dir, "writer-1"), newVol(h.dir, "writer-2")}
	for _, w := range writers {
		h.mustCreate(w, writerSize, "thin")
		h.stageAndPublish(w)
	}
	t.Logf("promised %d MiB (thick 48, victim 64, writers 2×%d) on a %d MiB pool with %d MiB free",
		(48*mib+64*mib+2*writerSize)/mib, writerSize/mib, poolFSSize/mib, h.free()/mib)

	var writer *vol // the one that ran the pool out
	var werr error
	for _, w := range writers {
		written, err := fill(w, writerSize)
		t.Logf("%s: %d MiB written, then: %v (pool: %d MiB free)", w.name, written/mib, err, h.free()/mib)
		writer, werr = w, err
		if h.free() < mib {
			break
		}
	}
	if h.free() >= mib {
		t.Fatalf("the writers did not fill the pool: %d MiB still free", h.free()/mib)
	}
	var errno syscall.Errno
	switch {
	case werr == nil:
		t.Errorf("%s filled its volume without an error although the pool ran out", writer.name)
	case errors.As(werr, &errno) && (errno == syscall.ENOSPC || errno == syscall.EIO || errno == syscall.EROFS):
		t.Logf("the writer that ran the pool out saw %s (%s)", unix.ErrnoName(errno), errno)
	default:
		t.Errorf("writer error %v, want ENOSPC, EIO or EROFS", werr)
	}
	t.Logf("pool after the writers: %d MiB free, GetCapacity %d MiB", h.free()/mib, h.available()/mib)

	// The pool's and the volume's health.
	sh, err := h.d.Node.NodeGetStorageHealth(h.ctx, &csipb.NodeGetStorageHealthRequest{})
	if err != nil {
		t.Fatalf("NodeGetStorageHealth: %v", err)
	}
	nearlyFull := false
	for _, b := range sh.GetBackendHealth() {
		t.Logf("NodeGetStorageHealth: %s %s: %s", b.GetStatus(), b.GetReason(), b.GetMessage())
		nearlyFull = nearlyFull || b.GetReason() == "PoolNearlyFull"
	}
	if !nearlyFull {
		t.Errorf("NodeGetStorageHealth does not report PoolNearlyFull on a full pool: %v", sh.GetBackendHealth())
	}
	if kmsg := kernelErrors(t); kmsg != "" {
		t.Logf("kernel log:\n%s", kmsg)
	}
	vh, err := h.d.Node.NodeGetVolumeHealth(h.ctx, &csipb.NodeGetVolumeHealthRequest{
		VolumeId: writer.id, VolumePublishPath: writer.target, StagingTargetPath: writer.staging,
	})
	if err != nil {
		t.Fatalf("NodeGetVolumeHealth: %v", err)
	}
	ro := fsReadOnly(t, writer.staging)
	t.Logf("writer's filesystem read-only (kernel): %v", ro)
	var reasons []string
	for _, e := range vh.GetVolumeHealth().GetHealthStatuses() {
		reasons = append(reasons, e.GetReason())
		t.Logf("NodeGetVolumeHealth(writer): %s %s: %s", e.GetStatus(), e.GetReason(), e.GetMessage())
	}
	if len(reasons) == 0 {
		// Reported, not failed: no VolumeHealth reason covers "the pool
		// under this thin volume is full" yet; NodeGetStorageHealth does.
		t.Logf("NodeGetVolumeHealth(%s): no entries: the volume reads as healthy although its writes fail", writer.name)
	}
	if ro && !strings.Contains(strings.Join(reasons, ","), "FilesystemReadOnly") {
		t.Errorf("the writer's filesystem went read-only but NodeGetVolumeHealth does not say FilesystemReadOnly: %v", reasons)
	}

	// Thick means reserved: the thick volume takes writes on a full pool.
	if err := tryWrite(thick, 16*mib, 3); err != nil {
		t.Errorf("writing into the thick volume on a full pool: %v (its space should be reserved)", err)
	} else {
		t.Logf("thick volume: 16 MiB written and synced on the full pool")
	}

	// Nothing new fits, and a refused create leaves nothing.
	late := newVol(h.dir, "late")
	if err := h.create(late, 16*mib, "thin"); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("create on a full pool: %v, want RESOURCE_EXHAUSTED", err)
	}
	h.expectFiles("after a create on the full pool", thick, victim, writers[0], writers[1])
	h.snapshotOnFullPool(t, victim)
	h.expandOnFullPool(t, thick)
	h.expectFiles("after a snapshot and an expansion on the full pool", thick, victim, writers[0], writers[1])

	// The victim's data is intact, read back through a fresh mount while
	// the pool is still full (a pod restarting on the full node).
	h.unpublishAndUnstage(victim)
	h.stageAndPublish(victim)
	verifyData(t, victim)
	verifyData(t, thick)

	// The writers can be torn down on the full pool, which gives the
	// space back.
	for _, w := range writers {
		h.unpublishAndUnstage(w)
		h.delete(w)
	}
	t.Logf("after deleting the writers: %d MiB free", h.free()/mib)
	h.unpublishAndUnstage(victim)
	h.stageAndPublish(victim)
	verifyData(t, victim)
	for _, v := range []*vol{victim, thick} {
		h.unpublishAndUnstage(v)
		h.delete(v)
	}
	h.expectFiles("at the end")
	if m := driver.Mounts(t, filepath.Join(h.dir, "pods")); len(m) != 0 {
		t.Errorf("mounts left: %v", m)
	}
	for _, l := range driver.Loops(t, h.d.PoolDir) {
		t.Errorf("loop device left: %s on %s", l.Path, l.BackingFile)
	}
}

// writeData writes n bytes of seeded data to v's data file and syncs it,
// remembering them as acknowledged.
func writeData(t *testing.T, v *vol, n int, seed uint64) {
	t.Helper()
	data := make([]byte, n)
	_, _ = rand.NewChaCha8([32]byte{byte(seed)}).Read(data)
	f, err := os.OpenFile(filepath.Join(v.target, "data"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	v.data = data
}

// tryWrite writes n more bytes to another file of v and syncs them.
func tryWrite(v *vol, n int, seed uint64) error {
	data := make([]byte, n)
	_, _ = rand.NewChaCha8([32]byte{byte(seed)}).Read(data)
	f, err := os.OpenFile(filepath.Join(v.target, "more"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		return err
	}
	return f.Sync()
}

func verifyData(t *testing.T, v *vol) {
	t.Helper()
	f, err := os.Open(filepath.Join(v.target, "data"))
	if err != nil {
		t.Errorf("%s: %v", v.name, err)
		return
	}
	defer f.Close()
	got := make([]byte, len(v.data))
	if _, err := io.ReadFull(f, got); err != nil {
		t.Errorf("%s: read back: %v", v.name, err)
		return
	}
	if sha256.Sum256(got) != sha256.Sum256(v.data) {
		t.Errorf("CORRUPTION: %s: data read back differs from data written", v.name)
		return
	}
	t.Logf("%s: %d MiB read back intact", v.name, len(v.data)/mib)
}

// fill writes to v in 1 MiB chunks, syncing every 4 MiB, as a pod would,
// until an error or size bytes. It returns the bytes written before the
// first error and that error, which says whether write(2) or fsync(2)
// failed and wraps the errno.
func fill(v *vol, size int64) (int64, error) {
	f, err := os.OpenFile(filepath.Join(v.target, "fill"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	chunk := make([]byte, mib)
	_, _ = rand.NewChaCha8([32]byte{9}).Read(chunk)
	var n int64
	for n < size {
		if _, err := f.Write(chunk); err != nil {
			return n, fmt.Errorf("write(2): %w", err)
		}
		n += mib
		if n%(4*mib) == 0 {
			if err := f.Sync(); err != nil {
				return n, fmt.Errorf("fsync(2): %w", err)
			}
		}
	}
	if err := f.Sync(); err != nil {
		return n, fmt.Errorf("fsync(2): %w", err)
	}
	return n, nil
}

// fsReadOnly reports whether the kernel shows the filesystem mounted at
// path read-only at the superblock (remounted after errors).
func fsReadOnly(t *testing.T, path string) bool {
	table, err := mount.Read()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range table.At(path) {
		for _, o := range m.SuperOptions {
			if o == "ro" {
				return true
			}
		}
	}
	return false
}

// kernelErrors returns recent kernel messages about ext4, I/O and loop
// errors (what the writers' failures looked like to the kernel), or "".
func kernelErrors(t *testing.T) string {
	out, err := exec.Command("dmesg", "--notime", "--level=err,warn,crit").Output()
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var keep []string
	for _, l := range lines[max(0, len(lines)-200):] {
		if strings.Contains(l, "EXT4-fs") || strings.Contains(l, "I/O error") || strings.Contains(l, "loop") {
			keep = append(keep, "    "+l)
		}
	}
	return strings.Join(keep[max(0, len(keep)-12):], "\n")
}

// controllerCaps reports whether ControllerGetCapabilities lists c.
func (h *harness) controllerCap(c csipb.ControllerServiceCapability_RPC_Type) bool {
	resp, err := h.d.Controller.ControllerGetCapabilities(h.ctx, &csipb.ControllerGetCapabilitiesRequest{})
	if err != nil {
		h.t.Fatal(err)
	}
	for _, x := range resp.GetCapabilities() {
		if x.GetRpc().GetType() == c {
			return true
		}
	}
	return false
}

// snapshotOnFullPool: a snapshot that cannot be copied is
// RESOURCE_EXHAUSTED, leaves no file, and leaves the volume's filesystem
// thawed (CreateSnapshot freezes a mounted filesystem while it copies).
func (h *harness) snapshotOnFullPool(t *testing.T, v *vol) {
	if !h.controllerCap(csipb.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT) {
		t.Logf("snapshot on the full pool: not tried, CREATE_DELETE_SNAPSHOT not advertised")
		return
	}
	resp, err := h.d.Controller.CreateSnapshot(h.ctx, &csipb.CreateSnapshotRequest{SourceVolumeId: v.id, Name: "full-" + v.name})
	switch status.Code(err) {
	case codes.OK:
		t.Logf("snapshot of %s on the full pool: created (reflink or nothing to copy)", v.name)
		if _, err := h.d.Controller.DeleteSnapshot(h.ctx, &csipb.DeleteSnapshotRequest{SnapshotId: resp.GetSnapshot().GetSnapshotId()}); err != nil {
			t.Errorf("delete snapshot: %v", err)
		}
	case codes.ResourceExhausted:
		t.Logf("snapshot of %s on the full pool: %v", v.name, err)
	default:
		t.Errorf("snapshot of %s on the full pool: %v, want RESOURCE_EXHAUSTED (or success)", v.name, err)
	}
	switch err := fs.Freeze(v.staging); {
	case err == nil:
		_ = fs.Thaw(v.staging)
	case errors.Is(err, unix.EBUSY):
		_ = fs.Thaw(v.staging)
		t.Errorf("BUG: the failed snapshot left %s's filesystem frozen at %s", v.name, v.staging)
	case errors.Is(err, unix.EIO):
		// Freezing flushes dirty data, which cannot reach a full pool: the
		// probe itself fails, and nothing was left frozen (EBUSY above).
		t.Logf("probe freeze of %s on the full pool: %v (expected: nothing can be flushed)", v.staging, err)
	default:
		t.Errorf("probe whether %s is frozen: %v", v.staging, err)
	}
}

// expandOnFullPool: growing a thick volume needs space the pool does not
// have: RESOURCE_EXHAUSTED, and the volume keeps its size.
func (h *harness) expandOnFullPool(t *testing.T, v *vol) {
	if !h.controllerCap(csipb.ControllerServiceCapability_RPC_EXPAND_VOLUME) {
		t.Logf("expansion on the full pool: not tried, EXPAND_VOLUME not advertised")
		return
	}
	img := filepath.Join(h.d.PoolDir, "volumes", v.id+".img")
	before, err := os.Stat(img)
	if err != nil {
		t.Fatal(err)
	}
	_, err = h.d.Controller.ControllerExpandVolume(h.ctx, &csipb.ControllerExpandVolumeRequest{
		VolumeId: v.id, CapacityRange: &csipb.CapacityRange{RequiredBytes: before.Size() + 64*mib}, VolumeCapability: v.cap,
	})
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("expanding thick %s by 64 MiB on the full pool: %v, want RESOURCE_EXHAUSTED", v.name, err)
	} else {
		t.Logf("expanding thick %s by 64 MiB on the full pool: %v", v.name, err)
	}
	after, err := os.Stat(img)
	if err != nil {
		t.Fatal(err)
	}
	if after.Size() != before.Size() {
		t.Errorf("the refused expansion changed %s's image from %d to %d bytes", v.name, before.Size(), after.Size())
	}
}
