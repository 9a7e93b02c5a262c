package faults

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/filevol/filevol/internal/hostos/mount"
)

// Volume kinds the test draws from (-kinds narrows them).
var kinds = []string{"ext4", "xfs", "btrfs", "block"}

// volume is one volume under test: where it is staged and published, and
// what was written to it and acknowledged (fsync returned).
type volume struct {
	name, id        string
	kind            string
	size            int64
	staging, target string
	// The acknowledged contents: length bytes generated from seed, whose
	// sha256 is sum. Zero length: nothing acknowledged yet.
	seed   uint64
	length int
	sum    [32]byte
	// snap is the snapshot taken of the acknowledged contents, if any.
	snap *snapshot
}

type snapshot struct {
	id, name     string
	size         int64
	seed         uint64
	length       int
	sum          [32]byte
	kind, source string
}

// features are the optional capabilities the driver advertises.
type features struct {
	snapshot, expand, nodeExpand bool
}

func (f features) String() string {
	return fmt.Sprintf("snapshot=%v expand=%v nodeExpand=%v", f.snapshot, f.expand, f.nodeExpand)
}

// detectFeatures asks ControllerGetCapabilities and NodeGetCapabilities.
func detectFeatures(ctx context.Context, p *proc) (features, error) {
	var f features
	cc, err := p.ctrl.ControllerGetCapabilities(ctx, &csipb.ControllerGetCapabilitiesRequest{})
	if err != nil {
		return f, err
	}
	for _, c := range cc.GetCapabilities() {
		switch c.GetRpc().GetType() {
		case csipb.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT:
			f.snapshot = true
		case csipb.ControllerServiceCapability_RPC_EXPAND_VOLUME:
			f.expand = true
		}
	}
	nc, err := p.node.NodeGetCapabilities(ctx, &csipb.NodeGetCapabilitiesRequest{})
	if err != nil {
		return f, err
	}
	for _, c := range nc.GetCapabilities() {
		if c.GetRpc().GetType() == csipb.NodeServiceCapability_RPC_EXPAND_VOLUME {
			f.nodeExpand = true
		}
	}
	return f, nil
}

func newVolume(dir, name, kind string) *volume {
	size := int64(64 << 20)
	switch kind {
	case "xfs":
		size = 300 << 20 // the xfs minimum
	case "btrfs":
		size = 128 << 20 // the btrfs minimum
	case "block":
		size = 32 << 20
	}
	return &volume{
		name: name, kind: kind, size: size,
		staging: filepath.Join(dir, "kubelet", "plugins", name, "globalmount"),
		target:  filepath.Join(dir, "kubelet", "pods", name, "volume"),
	}
}

func (v *volume) block() bool { return v.kind == "block" }

func (v *volume) capability() *csipb.VolumeCapability {
	am := &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}
	if v.block() {
		return &csipb.VolumeCapability{AccessMode: am, AccessType: &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}}}
	}
	return &csipb.VolumeCapability{AccessMode: am, AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{FsType: v.kind}}}
}

func (v *volume) String() string { return v.name + " (" + v.id + ", " + v.kind + ")" }

// ops drives volumes through CSI calls on p, retrying like the sidecars
// and kubelet, and counting into st.
type ops struct {
	p  *proc
	st *stats
	f  features
	// attemptTimeout and stepTimeout, when not zero, replace callTimeout
	// and stepTimeout (the harness's own tests wait less).
	attemptTimeout, stepTimeout time.Duration
}

func (o *ops) create(v *volume, src *csipb.VolumeContentSource) error {
	return o.call("CreateVolume", v.String(), func(ctx context.Context) error {
		resp, err := o.p.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{
			Name: v.name, VolumeCapabilities: []*csipb.VolumeCapability{v.capability()},
			CapacityRange: &csipb.CapacityRange{RequiredBytes: v.size}, VolumeContentSource: src,
		})
		if err == nil {
			v.id = resp.GetVolume().GetVolumeId()
			if got := resp.GetVolume().GetCapacityBytes(); got < v.size {
				return fmt.Errorf("created with %d bytes, asked for %d", got, v.size)
			}
		}
		return err
	})
}

func (o *ops) stage(v *volume) error {
	return o.call("NodeStageVolume", v.String(), func(ctx context.Context) error {
		_, err := o.p.node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{
			VolumeId: v.id, StagingTargetPath: v.staging, VolumeCapability: v.capability(),
		})
		return err
	})
}

func (o *ops) publish(v *volume) error {
	return o.call("NodePublishVolume", v.String(), func(ctx context.Context) error {
		_, err := o.p.node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{
			VolumeId: v.id, StagingTargetPath: v.staging, TargetPath: v.target, VolumeCapability: v.capability(),
		})
		return err
	})
}

func (o *ops) unpublish(v *volume) error {
	return o.call("NodeUnpublishVolume", v.String(), func(ctx context.Context) error {
		_, err := o.p.node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: v.id, TargetPath: v.target})
		return err
	})
}

func (o *ops) unstage(v *volume) error {
	return o.call("NodeUnstageVolume", v.String(), func(ctx context.Context) error {
		_, err := o.p.node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: v.id, StagingTargetPath: v.staging})
		return err
	})
}

func (o *ops) delete(v *volume) error {
	return o.call("DeleteVolume", v.String(), func(ctx context.Context) error {
		_, err := o.p.ctrl.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: v.id})
		return err
	}, codes.NotFound)
}

func (o *ops) stageAndPublish(v *volume) error {
	if err := o.stage(v); err != nil {
		return err
	}
	return o.publish(v)
}

func (o *ops) unpublishAndUnstage(v *volume) error {
	if err := o.unpublish(v); err != nil {
		return err
	}
	return o.unstage(v)
}

// takeSnapshot snapshots v (CreateSnapshot, retried; polled until ready).
func (o *ops) takeSnapshot(v *volume) error {
	s := &snapshot{name: "snap-" + v.name, size: v.size, seed: v.seed, length: v.length, sum: v.sum, kind: v.kind, source: v.id}
	err := o.call("CreateSnapshot", s.name, func(ctx context.Context) error {
		resp, err := o.p.ctrl.CreateSnapshot(ctx, &csipb.CreateSnapshotRequest{SourceVolumeId: v.id, Name: s.name})
		if err != nil {
			return err
		}
		s.id = resp.GetSnapshot().GetSnapshotId()
		if got := resp.GetSnapshot().GetSourceVolumeId(); got != v.id {
			return fmt.Errorf("snapshot %s has source %q, want %q", s.id, got, v.id)
		}
		if !resp.GetSnapshot().GetReadyToUse() {
			return errNotReady
		}
		return nil
	})
	for i := 0; errors.Is(err, errNotReady) && i < 600; i++ {
		time.Sleep(100 * time.Millisecond)
		err = o.call("ListSnapshots", s.name, func(ctx context.Context) error {
			resp, err := o.p.ctrl.ListSnapshots(ctx, &csipb.ListSnapshotsRequest{SnapshotId: s.id})
			if err != nil {
				return err
			}
			for _, e := range resp.GetEntries() {
				if e.GetSnapshot().GetSnapshotId() == s.id && e.GetSnapshot().GetReadyToUse() {
					return nil
				}
			}
			return errNotReady
		})
	}
	if err != nil {
		return err
	}
	v.snap = s
	return nil
}

var errNotReady = errors.New("snapshot not ready to use")

func (o *ops) deleteSnapshot(s *snapshot) error {
	return o.call("DeleteSnapshot", s.name, func(ctx context.Context) error {
		_, err := o.p.ctrl.DeleteSnapshot(ctx, &csipb.DeleteSnapshotRequest{SnapshotId: s.id})
		return err
	}, codes.NotFound)
}

// restoreAndVerify makes a volume from snapshot s, checks it holds what s
// was taken of, and deletes it.
func (o *ops) restoreAndVerify(dir string, s *snapshot) error {
	r := newVolume(dir, "restore-"+s.name, s.kind)
	r.size = s.size
	r.seed, r.length, r.sum = s.seed, s.length, s.sum
	src := &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Snapshot{
		Snapshot: &csipb.VolumeContentSource_SnapshotSource{SnapshotId: s.id}}}
	if err := o.create(r, src); err != nil {
		return err
	}
	if err := o.stageAndPublish(r); err != nil {
		return err
	}
	if err := o.verify(r); err != nil {
		return fmt.Errorf("restored from snapshot %s: %w", s.id, err)
	}
	if err := o.unpublishAndUnstage(r); err != nil {
		return err
	}
	return o.delete(r)
}

// expand grows v by 64 MiB: ControllerExpandVolume, then NodeExpandVolume
// when the controller says it is needed (v must be published).
func (o *ops) expand(v *volume) error {
	nodeNeeded, err := o.controllerExpand(v, v.size+64<<20)
	if err != nil {
		return err
	}
	if !nodeNeeded || !o.f.nodeExpand {
		return nil
	}
	err = o.nodeExpand(v)
	if status.Code(err) != codes.FailedPrecondition {
		return err
	}
	// The driver could not grow the mounted filesystem (online ext4
	// resize needs CAP_SYS_RESOURCE, which some containers lack) and says
	// the next stage grows it offline: what kubelet does when the pod
	// restarts.
	o.st.add(func(s *stats) { s.offlineResizes++ })
	if err := o.unpublishAndUnstage(v); err != nil {
		return err
	}
	if err := o.stageAndPublish(v); err != nil {
		return err
	}
	return o.nodeExpand(v)
}

// controllerExpand is ControllerExpandVolume to want bytes, retried; on
// success v.size is want. It returns node_expansion_required.
func (o *ops) controllerExpand(v *volume, want int64) (bool, error) {
	nodeNeeded, got := false, want
	err := o.call("ControllerExpandVolume", v.String(), func(ctx context.Context) error {
		resp, err := o.p.ctrl.ControllerExpandVolume(ctx, &csipb.ControllerExpandVolumeRequest{
			VolumeId: v.id, CapacityRange: &csipb.CapacityRange{RequiredBytes: want}, VolumeCapability: v.capability(),
		})
		if err != nil {
			return err
		}
		if resp.GetCapacityBytes() < want {
			return fmt.Errorf("expanded to %d bytes, asked for %d", resp.GetCapacityBytes(), want)
		}
		nodeNeeded, got = resp.GetNodeExpansionRequired(), resp.GetCapacityBytes()
		return nil
	})
	if err == nil {
		// The answer is the size (spec: capacity after expansion): it may
		// be more than asked (btrfs cannot grow to less than 256 MiB).
		v.size = got
	}
	return nodeNeeded, err
}

func (o *ops) nodeExpand(v *volume) error {
	return o.call("NodeExpandVolume", v.String(), func(ctx context.Context) error {
		resp, err := o.p.node.NodeExpandVolume(ctx, &csipb.NodeExpandVolumeRequest{
			VolumeId: v.id, VolumePath: v.target, StagingTargetPath: v.staging,
			CapacityRange: &csipb.CapacityRange{RequiredBytes: v.size}, VolumeCapability: v.capability(),
		})
		if err == nil && resp.GetCapacityBytes() != 0 && resp.GetCapacityBytes() < v.size {
			return fmt.Errorf("node expanded to %d bytes, asked for %d", resp.GetCapacityBytes(), v.size)
		}
		return err
	})
}

// checkSize checks that the published volume shows its current size: the
// device size for block, a filesystem larger than the size before the
// last expansion for mounts (filesystems keep some of it for themselves).
func checkSize(v *volume, atLeast int64) error {
	if v.block() {
		f, err := os.Open(v.target)
		if err != nil {
			return err
		}
		defer f.Close()
		n, err := f.Seek(0, io.SeekEnd)
		if err != nil {
			return err
		}
		if n != v.size {
			return fmt.Errorf("block device of %s is %d bytes, want %d", v, n, v.size)
		}
		return nil
	}
	var st unix.Statfs_t
	if err := unix.Statfs(v.target, &st); err != nil {
		return err
	}
	if total := int64(st.Blocks) * st.Bsize; total <= atLeast {
		return fmt.Errorf("filesystem of %s is %d bytes after expansion to %d, not more than the %d before", v, total, v.size, atLeast)
	}
	return nil
}

// dataPath is where the pattern lives: a file in a mount volume, the
// device node itself for a block volume.
func (v *volume) dataPath() string {
	if v.block() {
		return v.target
	}
	return filepath.Join(v.target, "data")
}

// pattern returns n reproducible pseudo-random bytes.
func pattern(seed uint64, n int) []byte {
	var key [32]byte
	for i := range 8 {
		key[i] = byte(seed >> (8 * i))
	}
	buf := make([]byte, n)
	_, _ = rand.NewChaCha8(key).Read(buf)
	return buf
}

// write writes a new pattern to the published volume and fsyncs it (and
// its directory), as a database does before it acknowledges a commit. Only
// then is it recorded as acknowledged.
func (o *ops) write(v *volume, rng *rand.Rand) error {
	seed := rng.Uint64()
	n := (64 + rng.IntN(448)) << 12 // 256 KiB .. 2 MiB, whole 4 KiB blocks
	data := pattern(seed, n)
	flags := os.O_WRONLY
	if !v.block() {
		flags |= os.O_CREATE | os.O_TRUNC
	}
	f, err := os.OpenFile(v.dataPath(), flags, 0o600)
	if err != nil {
		return fmt.Errorf("write %s: %w", v, err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && !v.block() {
		err = syncDir(v.target)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", v, err)
	}
	v.seed, v.length, v.sum = seed, n, sha256.Sum256(data)
	o.st.add(func(s *stats) { s.bytes += int64(n) })
	return nil
}

// verify reads the acknowledged pattern back from the published volume.
func (o *ops) verify(v *volume) error {
	if v.length == 0 {
		return nil
	}
	// A target that is no mount point would read the directory underneath:
	// a publish that did not happen must not pass for intact data.
	if !isMountPoint(v.target) {
		return fmt.Errorf("verify %s: nothing is mounted at %s", v, v.target)
	}
	f, err := os.Open(v.dataPath())
	if err != nil {
		return fmt.Errorf("verify %s: %w", v, err)
	}
	defer f.Close()
	buf := make([]byte, v.length)
	if _, err := io.ReadFull(f, buf); err != nil {
		return fmt.Errorf("verify %s: read %d bytes: %w", v, v.length, err)
	}
	if sha256.Sum256(buf) != v.sum {
		want := pattern(v.seed, v.length)
		i := 0
		for i < len(buf) && buf[i] == want[i] {
			i++
		}
		return fmt.Errorf("%w: %s: acknowledged data differs from byte %d on (of %d)", errCorrupt, v, i, v.length)
	}
	o.st.add(func(s *stats) { s.verified++ })
	return nil
}

// errCorrupt marks a verification that read data other than what was
// acknowledged.
var errCorrupt = errors.New("CORRUPTION")

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// isMountPoint reports whether something is mounted at path.
func isMountPoint(path string) bool {
	table, err := mount.Read()
	return err == nil && len(table.At(path)) > 0
}
