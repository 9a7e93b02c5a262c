package dirpool

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/volume"
)

// The states a kill during a create or a delete can leave (doc.go), made
// on disk as the interrupted operation left them; the next open resolves
// each into the volume or nothing, and no subvolume is left counting
// against the pool.
func TestOpenRepairsInterruptedCreatesAndDeletes(t *testing.T) {
	p, dir := newPool(t)
	ctx := context.Background()

	// Killed before the create's commit: a subvolume in tmp, no record.
	tmp := openMeta(t, p, tmpDir)
	orphan := p.VolumeID("orphan")
	if err := createSubvolume(tmp, orphan); err != nil {
		t.Fatal(err)
	}
	if _, err := writeFile(filepath.Join(dir, metaDir, tmpDir, orphan, "f"), 4*mib); err != nil {
		t.Fatal(err)
	}

	// Killed after the commit, before the rename into place.
	rolled := Volume{Version: recordVersion, ID: p.VolumeID("rolled"), Name: "rolled", CapacityBytes: 16 * mib,
		Path: "base/rolled", GID: 50001, GIDAllocated: true, Mode: 0o770, CreatedAt: time.Now()}
	if err := createSubvolume(tmp, rolled.ID); err != nil {
		t.Fatal(err)
	}
	rolled.Subvolume = subvolOf(t, filepath.Join(dir, metaDir, tmpDir, rolled.ID))
	commitRecord(t, p, rolled)

	// Killed after a delete's rename into the trash, before the record's removal.
	half := create(t, p, "half", 16*mib, nil)
	if err := p.trash(half.Path, half); err != nil {
		t.Fatal(err)
	}
	// And a finished delete whose subvolume the deleter had not destroyed.
	gone := create(t, p, "gone", 16*mib, nil)
	kept := create(t, p, "kept", 16*mib, nil)
	p.stopCollector()
	if err := p.Delete(ctx, gone.ID); err != nil {
		t.Fatal(err)
	}
	// The same two, with the collector killed after it took the subvolume
	// out of the trash to destroy it (destroyTrashed), before the destroy.
	halfAside, goneAside := create(t, p, "half-aside", 16*mib, nil), create(t, p, "gone-aside", 16*mib, nil)
	if err := p.trash(halfAside.Path, halfAside); err != nil {
		t.Fatal(err)
	}
	if err := p.Delete(ctx, goneAside.ID); err != nil {
		t.Fatal(err)
	}
	trash, aside := openMeta(t, p, trashDir), openMeta(t, p, destroyingDir)
	for _, id := range []string{halfAside.ID, goneAside.ID} {
		names, err := p.entries(trashDir)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			if strings.HasPrefix(n, id+".") {
				if err := unix.Renameat(trash, n, aside, n); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	unix.Close(trash)
	unix.Close(aside)
	unix.Close(tmp)
	p.Close()

	p = openPool(t, dir)
	if err := p.EmptyTrash(); err != nil { // what the background deleter does
		t.Fatal(err)
	}
	assertClean(t, p, dir, 2)
	for _, id := range []string{rolled.ID, kept.ID} {
		f, err := p.OpenVolume(id)
		if err != nil {
			t.Errorf("volume %s after repair: %v", id, err)
			continue
		}
		f.Close()
	}
	for _, id := range []string{half.ID, gone.ID, orphan, halfAside.ID, goneAside.ID} {
		if p.Known(id) {
			t.Errorf("volume %s is back", id)
		}
	}
	for _, v := range []Volume{half, halfAside} {
		if _, err := os.Stat(filepath.Join(dir, v.Path)); !os.IsNotExist(err) {
			t.Errorf("the half-deleted volume %s's directory: %v", v.Name, err)
		}
	}
	// Nothing else is left under the pool's root: its own directory,
	// rolled's base directory and kept's directory.
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	want := []string{metaDir, "base", strings.Split(kept.Path, "/")[0]}
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Errorf("pool root holds %v, want %v", names, want)
	}
}

// A snapshot is a read-only subvolume, exact; a restore is a writable
// volume of its own with its own quota; deleting the source keeps both.
func TestSnapshotAndRestore(t *testing.T) {
	p, dir := newPool(t)
	ctx := context.Background()
	src := create(t, p, "src", 32*mib, map[string]string{ParamUID: "1000", ParamGID: "1000", ParamDirectoryPerms: "700"})
	if err := os.WriteFile(filepath.Join(dir, src.Path, "f"), []byte("before"), 0o640); err != nil {
		t.Fatal(err)
	}
	snap, err := p.CreateSnapshot(ctx, volume.SnapshotRequest{Name: "s1", SourceVolumeID: src.ID})
	if err != nil {
		t.Fatal(err)
	}
	if again, err := p.CreateSnapshot(ctx, volume.SnapshotRequest{Name: "s1", SourceVolumeID: src.ID}); err != nil || again.ID != snap.ID {
		t.Errorf("retried snapshot: %v, %v", again, err)
	}
	if err := os.WriteFile(filepath.Join(dir, src.Path, "f"), []byte("after"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, metaDir, snapsDir, snap.ID, "g"), nil, 0o640); err == nil {
		t.Error("the snapshot is writable")
	}
	if _, err := p.Create(ctx, volume.CreateRequest{Name: "r", CapacityBytes: 64 * mib,
		Source: &volume.ContentSource{Kind: volume.SourceSnapshot, ID: snap.ID}}); err != nil {
		t.Fatal(err)
	}
	r, _ := p.Record(p.VolumeID("r"))
	if data, err := os.ReadFile(filepath.Join(dir, r.Path, "f")); err != nil || string(data) != "before" {
		t.Errorf("restored file: %q, %v", data, err)
	}
	if r.Subvolume == src.Subvolume {
		t.Error("the restore shares the source's subvolume")
	}
	if _, err := writeFile(filepath.Join(dir, r.Path, "big"), 80*mib); err == nil {
		t.Error("the restore took 80 MiB with a 64 MiB quota")
	}
	if err := p.Delete(ctx, src.ID); err != nil {
		t.Fatal(err)
	}
	if err := p.DeleteSnapshot(ctx, snap.ID); err != nil {
		t.Fatal(err)
	}
	if err := p.DeleteSnapshot(ctx, snap.ID); err != nil {
		t.Errorf("second DeleteSnapshot: %v", err)
	}
	if err := p.EmptyTrash(); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(filepath.Join(dir, r.Path, "f")); err != nil || string(data) != "before" {
		t.Errorf("restore after its sources went: %q, %v", data, err)
	}
	assertClean(t, p, dir, 1)
}

func openMeta(t *testing.T, p *Pool, sub string) int {
	t.Helper()
	fd, err := p.metaFD(sub)
	if err != nil {
		t.Fatal(err)
	}
	return fd
}

func subvolOf(t *testing.T, path string) uint64 {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	id, err := subvolumeID(fd)
	if err != nil {
		t.Fatal(err)
	}
	return id
}
