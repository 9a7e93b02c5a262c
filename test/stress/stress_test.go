// Package stress hammers a few volumes with many concurrent callers
// to find races: 64 goroutines send random create, stage, publish,
// unpublish, unstage and delete calls (expand and snapshot calls too when
// the driver advertises them) for the same four volume names to the real
// services in-process (test/driver: real pool, loop devices and mounts).
// Every call must succeed or answer a code that says why (ABORTED for a
// call in flight on the volume, FAILED_PRECONDITION for a lifecycle step
// out of order, NOT_FOUND for a deleted volume); never UNKNOWN or
// INTERNAL. While it runs and at the end: never two writable loop devices
// for one image, never two mounts on one path, and records consistent
// with the pool directory and the driver's index. Run it under -race:
//
//	go test -race -count=1 -v ./test/stress -args -duration=60s
//
// Needs root (loop devices, mounts); skipped otherwise.
package stress

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/hostos/mount"
	"github.com/filevol/filevol/internal/pool"
	"github.com/filevol/filevol/internal/testutil"
	"github.com/filevol/filevol/test/driver"
)

var (
	durationFlag = flag.Duration("duration", 15*time.Second, "how long the callers hammer")
	callersFlag  = flag.Int("callers", 64, "concurrent callers")
	seedFlag     = flag.Uint64("seed", 0, "random seed (0: from the clock)")
	skipFlag     = flag.String("skip", "", "comma-separated RPCs not to call (e.g. NodeExpandVolume)")
)

// vol is one of the few volumes everyone fights over. Its staging path
// and two target paths are fixed, as kubelet's are for one PV.
type vol struct {
	name, id string
	cap      *csipb.VolumeCapability
	size     int64
	block    bool
	staging  string
	targets  [2]string
}

// op is one kind of call, with the codes other than OK that are proper
// answers to it while other callers race on the same volume.
type op struct {
	name  string
	ok    []codes.Code
	call  func(ctx context.Context, d *driver.Driver, v *vol, rng *rand.Rand) error
	needs string // "" or the capability it needs: "snapshot", "expand"
}

// Codes every call may answer while racing: ABORTED (another call on the
// volume is in flight). The rest are per call below.
var (
	lifecycleOrder = []codes.Code{codes.Aborted, codes.FailedPrecondition, codes.NotFound}
)

var ops = []op{
	{name: "CreateVolume", ok: []codes.Code{codes.Aborted}, call: func(ctx context.Context, d *driver.Driver, v *vol, _ *rand.Rand) error {
		_, err := d.Controller.CreateVolume(ctx, &csipb.CreateVolumeRequest{
			Name: v.name, VolumeCapabilities: []*csipb.VolumeCapability{v.cap},
			CapacityRange: &csipb.CapacityRange{RequiredBytes: v.size},
		})
		return err
	}},
	{name: "DeleteVolume", ok: lifecycleOrder, call: func(ctx context.Context, d *driver.Driver, v *vol, _ *rand.Rand) error {
		_, err := d.Controller.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: v.id})
		return err
	}},
	{name: "NodeStageVolume", ok: lifecycleOrder, call: func(ctx context.Context, d *driver.Driver, v *vol, _ *rand.Rand) error {
		_, err := d.Node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: v.id, StagingTargetPath: v.staging, VolumeCapability: v.cap})
		return err
	}},
	{name: "NodePublishVolume", ok: lifecycleOrder, call: func(ctx context.Context, d *driver.Driver, v *vol, rng *rand.Rand) error {
		_, err := d.Node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{
			VolumeId: v.id, StagingTargetPath: v.staging, TargetPath: v.targets[rng.IntN(2)], VolumeCapability: v.cap,
		})
		return err
	}},
	{name: "NodeUnpublishVolume", ok: lifecycleOrder, call: func(ctx context.Context, d *driver.Driver, v *vol, rng *rand.Rand) error {
		_, err := d.Node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: v.id, TargetPath: v.targets[rng.IntN(2)]})
		return err
	}},
	{name: "NodeUnstageVolume", ok: lifecycleOrder, call: func(ctx context.Context, d *driver.Driver, v *vol, _ *rand.Rand) error {
		_, err := d.Node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: v.id, StagingTargetPath: v.staging})
		return err
	}},
	{name: "ControllerExpandVolume", needs: "expand", ok: append(lifecycleOrder, codes.OutOfRange), call: func(ctx context.Context, d *driver.Driver, v *vol, rng *rand.Rand) error {
		_, err := d.Controller.ControllerExpandVolume(ctx, &csipb.ControllerExpandVolumeRequest{
			VolumeId: v.id, VolumeCapability: v.cap,
			CapacityRange: &csipb.CapacityRange{RequiredBytes: v.size + int64(1+rng.IntN(8))<<20},
		})
		return err
	}},
	{name: "NodeExpandVolume", needs: "nodeExpand", ok: lifecycleOrder, call: func(ctx context.Context, d *driver.Driver, v *vol, rng *rand.Rand) error {
		_, err := d.Node.NodeExpandVolume(ctx, &csipb.NodeExpandVolumeRequest{
			VolumeId: v.id, VolumePath: v.targets[rng.IntN(2)], StagingTargetPath: v.staging, VolumeCapability: v.cap,
		})
		return err
	}},
	{name: "CreateSnapshot", needs: "snapshot", ok: lifecycleOrder, call: func(ctx context.Context, d *driver.Driver, v *vol, rng *rand.Rand) error {
		name := snapName(v, rng.IntN(2))
		resp, err := d.Controller.CreateSnapshot(ctx, &csipb.CreateSnapshotRequest{SourceVolumeId: v.id, Name: name})
		if err == nil {
			rememberSnapshot(name, resp)
		}
		return err
	}},
	{name: "DeleteSnapshot", needs: "snapshot", ok: lifecycleOrder, call: func(ctx context.Context, d *driver.Driver, v *vol, rng *rand.Rand) error {
		id := snapshotID(snapName(v, rng.IntN(2)))
		if id == "" {
			return nil // never created: nothing to name
		}
		_, err := d.Controller.DeleteSnapshot(ctx, &csipb.DeleteSnapshotRequest{SnapshotId: id})
		return err
	}},
}

func snapName(v *vol, i int) string { return fmt.Sprintf("%s-snap-%d", v.name, i) }

// snapshots remembers the ID CreateSnapshot answered for each name, so
// DeleteSnapshot can name it (CSI snapshots are deleted by ID).
var snapshots sync.Map // name → ID

func rememberSnapshot(name string, resp *csipb.CreateSnapshotResponse) {
	if id := resp.GetSnapshot().GetSnapshotId(); id != "" {
		snapshots.Store(name, id)
	}
}

func snapshotID(name string) string {
	id, _ := snapshots.Load(name)
	s, _ := id.(string)
	return s
}

func TestConcurrentCallers(t *testing.T) {
	testutil.RequireRoot(t)
	dir := testutil.Scratch(t, "stress")
	d := driver.Start(t, dir)
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d, %d callers, %s", seed, *callersFlag, *durationFlag)
	have := capabilities(t, d)

	vols := makeVolumes(d.Pool, dir)
	var enabled []op
	for _, o := range ops {
		if slices.Contains(strings.Split(*skipFlag, ","), o.name) {
			t.Logf("%s not exercised: -skip", o.name)
			continue
		}
		if o.needs == "" || have[o.needs] {
			enabled = append(enabled, o)
		}
	}
	for _, n := range []string{"snapshot", "expand", "nodeExpand"} {
		if !have[n] {
			t.Logf("%s calls not exercised: the driver does not advertise the capability", n)
		}
	}

	res := newResults()
	stop := make(chan struct{})
	var samplerErrs []string
	var samplerWG sync.WaitGroup
	samplerWG.Go(func() { samplerErrs = sample(dir, d.PoolDir, vols, stop) })

	deadline := time.Now().Add(*durationFlag)
	var wg sync.WaitGroup
	for c := range *callersFlag {
		rng := rand.New(rand.NewPCG(seed, uint64(c)))
		wg.Go(func() {
			for time.Now().Before(deadline) {
				v := vols[rng.IntN(len(vols))]
				o := enabled[rng.IntN(len(enabled))]
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				start := time.Now()
				err := o.call(ctx, d, v, rng)
				cancel()
				res.record(o, v, err, time.Since(start))
				time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
			}
		})
	}
	wg.Wait()
	close(stop)
	samplerWG.Wait()

	t.Logf("calls by RPC and answer:%s", res.table())
	for _, e := range res.improper {
		t.Errorf("improper answer: %s", e)
	}
	for _, e := range samplerErrs {
		t.Errorf("while racing: %s", e)
	}
	for _, e := range checkEnd(t, d, vols) {
		t.Errorf("at the end: %s", e)
	}
	teardown(t, d, vols, have)
	for _, e := range checkRecords(d) {
		t.Errorf("after teardown: %s", e)
	}
	if m := driver.Mounts(t, dir); len(m) != 0 {
		t.Errorf("after teardown: %d mounts left, first %s", len(m), m[0].MountPoint)
	}
	if l := driver.Loops(t, dir); len(l) != 0 {
		t.Errorf("after teardown: %d loop devices left, first %s", len(l), l[0].Path)
	}
	if n := len(d.Pool.List()); n != 0 {
		t.Errorf("after teardown: %d volumes left in the pool", n)
	}
	t.Logf("%d calls, %d succeeded, %d improper answers, %d double attaches or mounts seen",
		res.total, res.succeeded, len(res.improper), len(samplerErrs))
}

func makeVolumes(p *pool.Pool, dir string) []*vol {
	kinds := []string{"ext4", "xfs", "block", "ext4"}
	var vols []*vol
	for i, k := range kinds {
		v := &vol{name: fmt.Sprintf("stress-%d-%s", i, k), size: 64 << 20, block: k == "block"}
		v.id = p.VolumeID(v.name) // the pool's ID and a hash of the name (internal/volid)
		am := &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}
		if v.block {
			v.cap = &csipb.VolumeCapability{AccessMode: am, AccessType: &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}}}
		} else {
			v.cap = &csipb.VolumeCapability{AccessMode: am, AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{FsType: k}}}
		}
		if k == "xfs" {
			v.size = 300 << 20
		}
		v.staging = filepath.Join(dir, "plugins", v.name, "globalmount")
		v.targets = [2]string{filepath.Join(dir, "pods", "a", v.name), filepath.Join(dir, "pods", "b", v.name)}
		vols = append(vols, v)
	}
	return vols
}

func capabilities(t *testing.T, d *driver.Driver) map[string]bool {
	ctx := context.Background()
	have := map[string]bool{}
	cc, err := d.Controller.ControllerGetCapabilities(ctx, &csipb.ControllerGetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cc.GetCapabilities() {
		switch c.GetRpc().GetType() {
		case csipb.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT:
			have["snapshot"] = true
		case csipb.ControllerServiceCapability_RPC_EXPAND_VOLUME:
			have["expand"] = true
		}
	}
	nc, err := d.Node.NodeGetCapabilities(ctx, &csipb.NodeGetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range nc.GetCapabilities() {
		if c.GetRpc().GetType() == csipb.NodeServiceCapability_RPC_EXPAND_VOLUME {
			have["nodeExpand"] = true
		}
	}
	return have
}

// results counts answers by RPC and code and collects improper ones.
type results struct {
	mu               sync.Mutex
	counts           map[string]map[codes.Code]int
	improper         []string
	total, succeeded int
}

func newResults() *results { return &results{counts: map[string]map[codes.Code]int{}} }

func (r *results) record(o op, v *vol, err error, took time.Duration) {
	c := status.Code(err)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.counts[o.name] == nil {
		r.counts[o.name] = map[codes.Code]int{}
	}
	r.counts[o.name][c]++
	r.total++
	if err == nil {
		r.succeeded++
		return
	}
	if !slices.Contains(o.ok, c) && len(r.improper) < 50 {
		r.improper = append(r.improper, fmt.Sprintf("%s %s after %s: %v", o.name, v.name, took.Round(time.Millisecond), err))
	}
}

func (r *results) table() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var names []string
	for n := range r.counts {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "\n    %-24s", n)
		var cs []codes.Code
		for c := range r.counts[n] {
			cs = append(cs, c)
		}
		slices.Sort(cs)
		for _, c := range cs {
			fmt.Fprintf(&b, " %s=%d", c, r.counts[n][c])
		}
	}
	return b.String()
}

// sample checks, every few milliseconds while the callers race, that no
// image has two writable loop devices and no path has two mounts.
func sample(dir, poolDir string, vols []*vol, stop <-chan struct{}) []string {
	var errs []string
	seen := map[string]bool{}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return errs
		case <-tick.C:
		}
		for _, e := range doubles(dir, poolDir) {
			if !seen[e] {
				seen[e] = true
				errs = append(errs, e)
			}
		}
	}
}

// doubles lists images with more than one writable loop device and paths
// with more than one mount.
func doubles(dir, poolDir string) []string {
	var out []string
	devs, err := loop.List()
	if err != nil {
		return []string{err.Error()}
	}
	rw := map[string][]string{}
	for _, d := range devs {
		if strings.HasPrefix(d.BackingFile, poolDir+"/") && !d.ReadOnly {
			rw[d.BackingFile] = append(rw[d.BackingFile], d.Path)
		}
	}
	for img, ds := range rw {
		if len(ds) > 1 {
			out = append(out, fmt.Sprintf("DOUBLE ATTACH: %s has writable loop devices %v", filepath.Base(img), ds))
		}
	}
	table, err := mount.Read()
	if err != nil {
		return append(out, err.Error())
	}
	per := map[string]int{}
	for _, m := range table.Under(dir) {
		per[m.MountPoint]++
	}
	for mp, n := range per {
		if n > 1 {
			out = append(out, fmt.Sprintf("DOUBLE MOUNT: %d mounts at %s", n, mp))
		}
	}
	return out
}

// checkEnd checks the state the race left: no doubles; a mounted target
// only for a staged volume; records consistent.
func checkEnd(t *testing.T, d *driver.Driver, vols []*vol) []string {
	out := doubles(d.Dir, d.PoolDir)
	table, err := mount.Read()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vols {
		staged := v.staging
		if v.block {
			staged = filepath.Join(v.staging, "device")
		}
		stagedNow := len(table.At(staged)) > 0
		for _, tg := range v.targets {
			if len(table.At(tg)) > 0 && !stagedNow {
				out = append(out, fmt.Sprintf("%s is published at %s but not staged at %s", v.name, tg, staged))
			}
		}
		if stagedNow && !d.Pool.ImageExists(v.id) {
			out = append(out, fmt.Sprintf("%s is staged but its image is gone", v.name))
		}
	}
	return append(out, checkRecords(d)...)
}

// checkRecords: every record parses and names its own ID, has its image
// of the size it records, no temp file is left, and the driver's index
// (pool.List) and ListVolumes agree with the directory.
func checkRecords(d *driver.Driver) []string {
	var out []string
	vdir := filepath.Join(d.PoolDir, "volumes")
	entries, err := os.ReadDir(vdir)
	if err != nil {
		return []string{err.Error()}
	}
	onDisk := map[string]bool{}
	for _, e := range entries {
		name := e.Name()
		switch {
		case strings.HasPrefix(name, ".tmp-"):
			out = append(out, "temporary file left: "+name)
		case strings.HasSuffix(name, ".json"):
			id := strings.TrimSuffix(name, ".json")
			onDisk[id] = true
			data, err := os.ReadFile(filepath.Join(vdir, name))
			if err != nil {
				out = append(out, err.Error())
				continue
			}
			var rec struct {
				ID            string `json:"id"`
				CapacityBytes int64  `json:"capacityBytes"`
				ImagePending  bool   `json:"imagePending"`
			}
			if err := json.Unmarshal(data, &rec); err != nil || rec.ID != id {
				out = append(out, fmt.Sprintf("record %s does not parse or names %q: %v", name, rec.ID, err))
				continue
			}
			st, err := os.Stat(filepath.Join(vdir, id+".img"))
			switch {
			case errors.Is(err, fs.ErrNotExist) && rec.ImagePending:
				// A blank volume not used yet: its image is made at its
				// first use (internal/pool/pending.go).
			case err != nil:
				out = append(out, fmt.Sprintf("record %s has no image: %v", name, err))
			case st.Size() != rec.CapacityBytes:
				out = append(out, fmt.Sprintf("LOST UPDATE: record %s says %d bytes, image is %d", name, rec.CapacityBytes, st.Size()))
			}
		case strings.HasSuffix(name, ".img"):
			if _, err := os.Stat(filepath.Join(vdir, strings.TrimSuffix(name, ".img")+".json")); err != nil {
				out = append(out, "image without record: "+name)
			}
		}
	}
	var listed []string
	for _, v := range d.Pool.List() {
		listed = append(listed, v.ID)
	}
	var disk []string
	for id := range onDisk {
		disk = append(disk, id)
	}
	sort.Strings(disk)
	if !slices.Equal(listed, disk) {
		out = append(out, fmt.Sprintf("pool.List %v differs from the records on disk %v", listed, disk))
	}
	resp, err := d.Controller.ListVolumes(context.Background(), &csipb.ListVolumesRequest{})
	if err != nil {
		return append(out, "ListVolumes: "+err.Error())
	}
	var csiListed []string
	for _, e := range resp.GetEntries() {
		csiListed = append(csiListed, e.GetVolume().GetVolumeId())
	}
	sort.Strings(csiListed)
	if !slices.Equal(csiListed, disk) {
		out = append(out, fmt.Sprintf("ListVolumes %v differs from the records on disk %v", csiListed, disk))
	}
	return out
}

// teardown unpublishes, unstages and deletes everything, retrying ABORTED
// only (nothing else runs now).
func teardown(t *testing.T, d *driver.Driver, vols []*vol, have map[string]bool) {
	ctx := context.Background()
	for _, v := range vols {
		for _, tg := range v.targets {
			if _, err := d.Node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: v.id, TargetPath: tg}); err != nil {
				t.Errorf("teardown: unpublish %s at %s: %v", v.name, tg, err)
			}
		}
		if _, err := d.Node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: v.id, StagingTargetPath: v.staging}); err != nil {
			t.Errorf("teardown: unstage %s: %v", v.name, err)
		}
		if _, err := d.Controller.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: v.id}); err != nil {
			t.Errorf("teardown: delete %s: %v", v.name, err)
		}
	}
	if !have["snapshot"] {
		return
	}
	resp, err := d.Controller.ListSnapshots(ctx, &csipb.ListSnapshotsRequest{})
	if err != nil {
		t.Errorf("teardown: ListSnapshots: %v", err)
		return
	}
	for _, e := range resp.GetEntries() {
		if _, err := d.Controller.DeleteSnapshot(ctx, &csipb.DeleteSnapshotRequest{SnapshotId: e.GetSnapshot().GetSnapshotId()}); err != nil {
			t.Errorf("teardown: delete snapshot %s: %v", e.GetSnapshot().GetSnapshotId(), err)
		}
	}
}
