package ceph_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/dirpool"
	"github.com/filevol/filevol/internal/volume"
)

// A directory volume on CephFS is snapshotted with a CephFS snapshot
// (its .snap), restored and cloned by a copy into a new volume whose
// quota is set first: contents, owners, modes, times, symlinks, hard
// links, holes, xattrs and special files come along; a restore larger
// than its size is refused and leaves nothing; a volume deleted while it
// has snapshots is held until its last snapshot goes; a pod sees the
// snapshots read-only in .snap.
func TestDirectoryPoolSnapshotsOnCephFS(t *testing.T) {
	cl, a, b := twoNodes(t)
	ctx := context.Background()
	p, _ := openDirPool(t, a)
	const size = 16 * mib
	v := dirVolume(t, p, "src", size, nil)
	va, vb := filepath.Join(a, v.Path), filepath.Join(b, v.Path)
	fillTree(t, va)

	start := time.Now()
	s, err := p.CreateSnapshot(ctx, volume.SnapshotRequest{Name: "s1", SourceVolumeID: v.ID})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("snapshot: %v", time.Since(start).Round(time.Millisecond))
	if again, err := p.CreateSnapshot(ctx, volume.SnapshotRequest{Name: "s1", SourceVolumeID: v.ID}); err != nil || again.ID != s.ID || !again.CreatedAt.Equal(s.CreatedAt) {
		t.Errorf("the same snapshot again: %+v, %v", again, err)
	}
	if s.Engine != "cephfs-snapshot" || s.SizeBytes != size || len(p.ListSnapshots()) != 1 {
		t.Errorf("snapshot %+v, %d listed", s, len(p.ListSnapshots()))
	}
	// What a pod on another node sees: the snapshot, read-only, by its ID.
	snapB := filepath.Join(vb, ".snap", s.ID)
	if got, err := os.ReadFile(filepath.Join(snapB, "data")); err != nil || !bytes.Equal(got, treeData) {
		t.Errorf("node-b reads the snapshot's data: %d bytes, %v", len(got), err)
	}
	asUser(t, 1000, func() error {
		if err := os.WriteFile(filepath.Join(snapB, "new"), nil, 0o644); !errors.Is(err, unix.EROFS) {
			return fmt.Errorf("a pod writing into the snapshot: %v, want EROFS", err)
		}
		return nil
	})
	// The volume changes after the snapshot.
	writeSync(t, filepath.Join(va, "data"), "changed")
	if err := os.Remove(filepath.Join(va, "dir", "link")); err != nil {
		t.Fatal(err)
	}

	start = time.Now()
	r := dirVolume(t, p, "restored", size, &volume.ContentSource{Kind: volume.SourceSnapshot, ID: s.ID})
	t.Logf("restore of a small tree: %v", time.Since(start).Round(time.Millisecond))
	sameTree(t, filepath.Join(a, v.Path, ".snap", s.ID), filepath.Join(b, r.Path))
	if q, err := getxattr(filepath.Join(b, r.Path), "ceph.quota.max_bytes"); err != nil || q != fmt.Sprint(size) {
		t.Errorf("the restore's quota: %q, %v", q, err)
	}
	// Holes stay holes: the copy has no more RADOS objects than the source.
	var ss, rs unix.Stat_t
	if unix.Stat(filepath.Join(va, "sparse"), &ss) != nil || unix.Stat(filepath.Join(b, r.Path, "sparse"), &rs) != nil {
		t.Fatal("stat sparse")
	}
	if so, ro := cl.FileObjects(t, ss.Ino), cl.FileObjects(t, rs.Ino); ro > so {
		t.Errorf("the sparse file: %d objects in the source, %d in the restore", so, ro)
	}
	c := dirVolume(t, p, "clone", size, &volume.ContentSource{Kind: volume.SourceVolume, ID: v.ID})
	sameTree(t, va, filepath.Join(b, c.Path))
	if names := snapNames(t, va); len(names) != 1 || names[0] != s.ID {
		t.Errorf("the source's .snap after the clone: %v, want only %s", names, s.ID)
	}

	// Larger than its size: refused, nothing left.
	_, err = p.Create(ctx, volume.CreateRequest{Name: "small", CapacityBytes: mib,
		Source: &volume.ContentSource{Kind: volume.SourceSnapshot, ID: s.ID}})
	if !errors.Is(err, volume.ErrInvalidArgument) || !strings.Contains(err.Error(), "larger volume") {
		t.Errorf("a restore into 1 MiB: %v, want ErrInvalidArgument", err)
	}
	if left, _ := os.ReadDir(filepath.Join(a, ".filevol", "tmp")); len(left) != 0 {
		t.Errorf("a refused restore left %d entries in tmp", len(left))
	}

	// Deleted with its snapshot, the volume is held: the snapshot still
	// restores; its last snapshot's delete lets it go.
	if err := p.Delete(ctx, v.ID); err != nil {
		t.Fatal(err)
	}
	if err := p.EmptyTrash(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(va); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the deleted volume's directory: %v", err)
	}
	held, _ := os.ReadDir(filepath.Join(a, ".filevol", "held"))
	if len(held) != 1 {
		t.Fatalf("held volumes: %d, want 1", len(held))
	}
	if live, _ := os.ReadDir(filepath.Join(a, ".filevol", "held", held[0].Name())); len(live) != 0 {
		t.Errorf("a held volume keeps %d live entries", len(live))
	}
	r2 := dirVolume(t, p, "restored-after-delete", size, &volume.ContentSource{Kind: volume.SourceSnapshot, ID: s.ID})
	sameTree(t, filepath.Join(b, r.Path), filepath.Join(b, r2.Path))
	if err := p.DeleteSnapshot(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	if err := p.EmptyTrash(); err != nil {
		t.Fatal(err)
	}
	if held, _ := os.ReadDir(filepath.Join(a, ".filevol", "held")); len(held) != 0 {
		t.Errorf("held after its last snapshot's delete: %d", len(held))
	}
	if len(p.ListSnapshots()) != 0 || p.DeleteSnapshot(ctx, s.ID) != nil {
		t.Errorf("after the delete: %d snapshots listed", len(p.ListSnapshots()))
	}
	// The restores are independent of it.
	sameTree(t, filepath.Join(b, r.Path), filepath.Join(a, r2.Path))
}

// What a kill leaves is resolved when the pool opens again alone: a
// snapshot made but not committed, one committed but not renamed, one
// whose record went, the snapshot a clone copied from, a copy without
// its record, a volume moved to held/ whose record stayed.
func TestDirectoryPoolSnapshotRepairOnCephFS(t *testing.T) {
	_, a, _ := twoNodes(t)
	ctx := context.Background()
	p, closePool := openDirPool(t, a)
	v := dirVolume(t, p, "v", 4*mib, nil)
	writeSync(t, filepath.Join(a, v.Path, "f"), "data")
	kept, err := p.CreateSnapshot(ctx, volume.SnapshotRequest{Name: "kept", SourceVolumeID: v.ID})
	if err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(a, v.Path, ".snap")
	// Committed but not renamed: the record is there, the data under .tmp-.
	if err := os.Rename(filepath.Join(snap, kept.ID), filepath.Join(snap, ".tmp-"+kept.ID)); err != nil {
		t.Fatal(err)
	}
	orphan, pod := p.SnapshotID("never-committed"), p.SnapshotID("record-removed")
	for _, n := range []string{".tmp-" + orphan, pod, ".tmp-" + p.VolumeID("a-clone"), "pods-own"} {
		if err := os.Mkdir(filepath.Join(snap, n), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(a, ".filevol", "tmp", p.VolumeID("a-copy")), 0o755); err != nil {
		t.Fatal(err)
	}
	closePool()
	start := time.Now()
	p, closePool = openDirPool(t, a)
	t.Logf("open with repair: %v", time.Since(start).Round(time.Millisecond))
	want := []string{kept.ID, "pods-own"}
	if got := snapNames(t, filepath.Join(a, v.Path)); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf(".snap after the repair: %v, want %v", got, want)
	}
	if left, _ := os.ReadDir(filepath.Join(a, ".filevol", "tmp")); len(left) != 0 {
		t.Errorf("tmp after the repair: %d entries", len(left))
	}
	if _, err := p.Create(ctx, volume.CreateRequest{Name: "r", CapacityBytes: 4 * mib,
		Source: &volume.ContentSource{Kind: volume.SourceSnapshot, ID: kept.ID}}); err != nil {
		t.Errorf("restore from the rolled-forward snapshot: %v", err)
	}

	// A delete killed after its move to held/, before its record went.
	vdir := filepath.Join(a, v.Path)
	var st unix.Stat_t
	if err := unix.Stat(vdir, &st); err != nil {
		t.Fatal(err)
	}
	closePool()
	if err := os.Rename(vdir, filepath.Join(a, ".filevol", "held", fmt.Sprintf("%s.%d", v.ID, st.Ino))); err != nil {
		t.Fatal(err)
	}
	p, closePool = openDirPool(t, a)
	if _, err := p.Record(v.ID); !errors.Is(err, volume.ErrNotFound) {
		t.Errorf("the record of a volume found in held/: %v, want gone", err)
	}
	if _, err := p.Create(ctx, volume.CreateRequest{Name: "r2", CapacityBytes: 4 * mib,
		Source: &volume.ContentSource{Kind: volume.SourceSnapshot, ID: kept.ID}}); err != nil {
		t.Errorf("restore from a held volume's snapshot: %v", err)
	}
}

// The cluster decides who may take snapshots: with new snapshots off,
// CreateSnapshot says which setting to change; a client whose MDS
// capability lacks "s" (the nodes' clients, so pods) cannot make or
// remove a snapshot in .snap, filevol's included.
func TestDirectorySnapshotsRefusedOnCephFS(t *testing.T) {
	cl, a, b := twoNodes(t)
	ctx := context.Background()
	p, _ := openDirPool(t, a)
	v := dirVolume(t, p, "v", 4*mib, nil)
	s, err := p.CreateSnapshot(ctx, volume.SnapshotRequest{Name: "s", SourceVolumeID: v.ID})
	if err != nil {
		t.Fatal(err)
	}
	cl.Ceph(t, "fs", "set", "cephfs", "allow_new_snaps", "false")
	_, err = p.CreateSnapshot(ctx, volume.SnapshotRequest{Name: "off", SourceVolumeID: v.ID})
	cl.Ceph(t, "fs", "set", "cephfs", "allow_new_snaps", "true")
	if !errors.Is(err, dirpool.ErrSnapshotRefused) || !strings.Contains(err.Error(), "allow_new_snaps true") {
		t.Errorf("snapshot with new snapshots off: %v", err)
	}
	t.Logf("with allow_new_snaps false: %v", err)
	if got := snapNames(t, filepath.Join(a, v.Path)); len(got) != 1 {
		t.Errorf("a refused snapshot left %v", got)
	}

	user := cl.ClientUser(t, "node-b")
	cl.Ceph(t, "auth", "caps", user, "mon", "allow r", "mds", "allow rwp", "osd", "allow rw tag cephfs data=cephfs")
	t.Cleanup(func() {
		cl.Ceph(t, "auth", "caps", user, "mon", "allow r", "mds", "allow rwps", "osd", "allow rw tag cephfs data=cephfs")
	})
	cl.RestartClient(t, "node-b")
	vb := filepath.Join(b, v.Path, ".snap")
	if err := unix.Rmdir(filepath.Join(vb, s.ID)); !errors.Is(err, unix.EACCES) {
		t.Errorf("node-b without \"s\" removing filevol's snapshot: %v, want EACCES", err)
	}
	if err := os.Mkdir(filepath.Join(vb, "pods"), 0o755); !errors.Is(err, unix.EACCES) {
		t.Errorf("node-b without \"s\" making a snapshot: %v, want EACCES", err)
	}
	pb, _ := openDirPool(t, b)
	_, err = pb.CreateSnapshot(ctx, volume.SnapshotRequest{Name: "no-s", SourceVolumeID: v.ID})
	if !errors.Is(err, dirpool.ErrSnapshotRefused) || !strings.Contains(err.Error(), "allow rwps") {
		t.Errorf("a pool on a client without \"s\": %v", err)
	}
	t.Logf("on a client without \"s\": %v", err)
}
