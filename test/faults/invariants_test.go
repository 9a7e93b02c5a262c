package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/hostos/mount"
)

// state is what must exist when nothing is in flight: the volumes the
// test created and did not delete (with their snapshots), and which of
// them are staged and published now.
type state struct {
	volumes   map[string]*volume // by ID
	published map[string]*volume // by ID; a subset of volumes
}

// checkInvariants compares the pool directory, the driver's answers and
// the kernel's state with s. It returns one line per violation: leaked
// files, devices or mounts, and volumes or snapshots lost.
func checkInvariants(ctx context.Context, p *proc, f features, s state) []string {
	bad := append(checkAtRest(p, s), checkDriverView(ctx, p, f, s)...)
	sort.Strings(bad)
	return bad
}

// checkAtRest is the part of checkInvariants that asks no driver: the
// pool directory and the kernel. It can run while no driver runs, before
// a restarted one repairs what its predecessor left.
func checkAtRest(p *proc, s state) []string {
	var bad []string
	add := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }

	// The pool directory: no temp file, no quarantined image, every record
	// with its image and every image with its record, exactly the volumes
	// the test owns, each record readable and of the acknowledged size.
	records, images := map[string]string{}, map[string]string{} // stem → path, per directory
	inUse := map[string]string{}                                // volume ID → in-use record
	err := filepath.WalkDir(p.pool, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(p.pool, path)
		name := d.Name()
		switch {
		case (name == ".lock" || name == "pool.json") && rel == name: // the lock, the pool's identity
		case strings.HasPrefix(rel, "inuse/") && strings.HasSuffix(name, ".json"):
			id, _, _ := strings.Cut(name, "@")
			inUse[id] = path
		case strings.HasPrefix(rel, "freeze/.owner-"):
			// The running controller's owner lock (internal/freeze).
		case strings.HasPrefix(rel, "freeze/") && !strings.HasPrefix(name, ".tmp-"):
			add("LEAK freeze request or answer left behind (a filesystem may stay frozen, or the next snapshot wait): %s", path)
		case strings.HasPrefix(rel, "quarantine/"):
			add("LEAK image quarantined (an image without a record appeared): %s", path)
		case strings.HasPrefix(name, ".tmp-"):
			add("LEAK temporary file left behind: %s", path)
		case strings.HasSuffix(name, ".json"):
			records[strings.TrimSuffix(rel, ".json")] = path
		case strings.HasSuffix(name, ".img"):
			images[strings.TrimSuffix(rel, ".img")] = path
		default:
			add("LEAK unexpected file in the pool: %s", path)
		}
		return nil
	})
	if err != nil {
		add("walk pool: %v", err)
	}
	for stem, path := range records {
		// A blank volume not used yet has no image: the pool makes it at
		// first use (internal/pool/pending.go), so that is no leak.
		if _, ok := images[stem]; !ok && !pendingRecord(path) {
			add("LEAK record without image: %s", path)
		}
	}
	for stem, path := range images {
		if _, ok := records[stem]; !ok {
			add("LEAK image without record: %s", path)
		}
	}
	// The node's in-use records say exactly which volumes are staged: the
	// controller deletes a volume none names.
	for id, path := range inUse {
		if _, ok := s.published[id]; !ok {
			add("LEAK in-use record of a volume that is not staged (DeleteVolume would refuse it): %s", path)
		}
	}
	for id, v := range s.published {
		if _, ok := inUse[id]; !ok {
			add("LOST in-use record of staged volume %s (DeleteVolume would delete it)", v)
		}
	}
	for stem, path := range records {
		dirName, id := filepath.Split(stem)
		if dirName != "volumes/" {
			continue
		}
		v, ok := s.volumes[id]
		if !ok {
			add("LEAK record of a volume deleted or never acknowledged: %s", path)
			continue
		}
		bad = append(bad, checkRecord(path, images[stem], v)...)
	}
	for id, v := range s.volumes {
		if _, ok := records["volumes/"+id]; !ok {
			add("LOST volume %s: its record is gone", v)
		}
	}

	// The kernel: a loop device backed by a pool file only for a staged
	// volume (exactly one writable device each), mounts only at the
	// staging and target paths of published volumes (exactly one each).
	devs, err := loop.List()
	if err != nil {
		add("list loop devices: %v", err)
	}
	perImage := map[string]int{}
	for _, d := range devs {
		// The pool is under p.dir, or, when a test mounts a pool
		// filesystem for it, beside it.
		if !strings.HasPrefix(d.BackingFile, p.dir+"/") && !strings.HasPrefix(d.BackingFile, p.pool+"/") {
			continue
		}
		id := strings.TrimSuffix(filepath.Base(d.BackingFile), ".img")
		switch v, ok := s.published[id]; {
		case d.Deleted:
			add("LEAK %s is backed by a deleted pool file %s", d.Path, d.BackingFile)
		case !ok || filepath.Dir(d.BackingFile) != filepath.Join(p.pool, "volumes"):
			add("LEAK %s is backed by %s, which no staged volume uses", d.Path, d.BackingFile)
		case !d.ReadOnly:
			perImage[id]++
			if perImage[id] > 1 {
				add("DOUBLE ATTACH %s: a second writable loop device %s", v, d.Path)
			}
		}
	}
	for id, v := range s.published {
		if perImage[id] == 0 {
			add("LOST staged volume %s has no loop device", v)
		}
	}
	table, err := mount.Read()
	if err != nil {
		add("read mounts: %v", err)
	}
	expected := map[string]bool{}
	for _, v := range s.published {
		staged := v.staging
		if v.block() {
			staged = filepath.Join(v.staging, "device")
		}
		expected[staged], expected[v.target] = true, true
	}
	seen := map[string]int{}
	for _, m := range table.Under(p.dir) {
		seen[m.MountPoint]++
		switch {
		case !expected[m.MountPoint]:
			add("LEAK mount at %s (%s from %s) belongs to no published volume", m.MountPoint, m.FSType, m.Source)
		case seen[m.MountPoint] == 2:
			add("DOUBLE MOUNT at %s", m.MountPoint)
		}
	}
	for mp := range expected {
		if seen[mp] == 0 {
			add("LOST nothing mounted at %s, which should be", mp)
		}
	}
	return bad
}

// checkDriverView compares ListVolumes (and ListSnapshots when f.snapshot)
// with s.
func checkDriverView(ctx context.Context, p *proc, f features, s state) []string {
	var bad []string
	add := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	listed, err := listVolumes(ctx, p)
	if err != nil {
		add("ListVolumes: %v", err)
	}
	for _, id := range listed {
		if _, ok := s.volumes[id]; !ok {
			add("LEAK ListVolumes returns %s, which the test deleted or never created", id)
		}
	}
	for id, v := range s.volumes {
		if !slices.Contains(listed, id) {
			add("LOST ListVolumes does not return %s", v)
		}
	}
	if f.snapshot {
		bad = append(bad, checkSnapshots(ctx, p, s)...)
	}
	return bad
}

// pendingRecord reports whether the record at path marks its volume
// pending (imagePending): blank, its image made at first use.
func pendingRecord(path string) bool {
	data, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	var rec struct {
		ImagePending bool `json:"imagePending"`
	}
	return json.Unmarshal(data, &rec) == nil && rec.ImagePending
}

// checkRecord checks a volume record: it parses, names its own ID, and
// gives the size of the image and the last acknowledged expansion.
func checkRecord(recPath, imgPath string, v *volume) []string {
	data, err := os.ReadFile(recPath)
	if err != nil {
		return []string{fmt.Sprintf("read record %s: %v", recPath, err)}
	}
	var rec struct {
		ID            string `json:"id"`
		Name          string `json:"name"`
		CapacityBytes int64  `json:"capacityBytes"`
	}
	if err := json.Unmarshal(data, &rec); err != nil {
		return []string{fmt.Sprintf("CORRUPT record %s: %v", recPath, err)}
	}
	var bad []string
	if rec.ID != v.id || rec.Name != v.name {
		bad = append(bad, fmt.Sprintf("CORRUPT record %s holds %s/%q, want %s/%q", recPath, rec.ID, rec.Name, v.id, v.name))
	}
	if rec.CapacityBytes != v.size {
		bad = append(bad, fmt.Sprintf("LOST UPDATE record %s says %d bytes, the acknowledged size is %d", recPath, rec.CapacityBytes, v.size))
	}
	if st, err := os.Stat(imgPath); err == nil && st.Size() != rec.CapacityBytes {
		bad = append(bad, fmt.Sprintf("LOST UPDATE image %s is %d bytes, its record says %d", imgPath, st.Size(), rec.CapacityBytes))
	}
	return bad
}

func listVolumes(ctx context.Context, p *proc) ([]string, error) {
	var ids []string
	token := ""
	for {
		resp, err := p.ctrl.ListVolumes(ctx, &csipb.ListVolumesRequest{StartingToken: token})
		if err != nil {
			return ids, err
		}
		for _, e := range resp.GetEntries() {
			ids = append(ids, e.GetVolume().GetVolumeId())
		}
		if token = resp.GetNextToken(); token == "" {
			return ids, nil
		}
	}
}

// checkSnapshots compares ListSnapshots with the snapshots the test keeps.
func checkSnapshots(ctx context.Context, p *proc, s state) []string {
	var bad []string
	want := map[string]*snapshot{}
	for _, v := range s.volumes {
		if v.snap != nil {
			want[v.snap.id] = v.snap
		}
	}
	got := map[string]bool{}
	token := ""
	for {
		resp, err := p.ctrl.ListSnapshots(ctx, &csipb.ListSnapshotsRequest{StartingToken: token})
		if err != nil {
			return append(bad, fmt.Sprintf("ListSnapshots: %v", err))
		}
		for _, e := range resp.GetEntries() {
			id := e.GetSnapshot().GetSnapshotId()
			if got[id] {
				bad = append(bad, fmt.Sprintf("ListSnapshots returns %s twice", id))
			}
			got[id] = true
			if _, ok := want[id]; !ok {
				bad = append(bad, fmt.Sprintf("LEAK ListSnapshots returns %s, which the test deleted or never created", id))
			}
		}
		if token = resp.GetNextToken(); token == "" {
			break
		}
	}
	for id, sn := range want {
		if !got[id] {
			bad = append(bad, fmt.Sprintf("LOST snapshot %s (%s) of %s", id, sn.name, sn.source))
		}
	}
	return bad
}
