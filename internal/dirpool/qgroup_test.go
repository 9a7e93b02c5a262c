package dirpool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/dirpool/dirpooltest"
	"github.com/filevol/filevol/internal/testutil"
)

// quotaModes are the two quota modes a pool meets: simple quotas, which
// Open enables on a filesystem without quotas, and full qgroups, which a
// filesystem may have had before it became a pool.
var quotaModes = []struct {
	name   string
	before []string // btrfs command run on the filesystem before Open
}{
	{"simple", nil},
	{"full", []string{"quota", "enable"}},
}

// newPoolIn opens a pool on a fresh btrfs, after running mode's command.
func newPoolIn(t *testing.T, before []string) (*Pool, string) {
	t.Helper()
	dir := dirpooltest.Btrfs(t, testutil.Scratch(t, "dirpool"), 1<<30)
	if before != nil {
		btrfs(t, append(before, dir)...)
	}
	return openPool(t, dir), dir
}

func btrfs(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("btrfs", args...).CombinedOutput(); err != nil {
		t.Fatalf("btrfs %v: %v: %s", args, err, out)
	}
}

var qgroupName = regexp.MustCompile(`^[0-9]+_[0-9]+$`)

// qgroups lists the filesystem's qgroups as sysfs names them ("0_257").
func qgroups(t *testing.T, p *Pool) []string {
	t.Helper()
	ents, err := os.ReadDir("/sys/fs/btrfs/" + p.uuid + "/qgroups")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if qgroupName.MatchString(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out
}

// settle waits for the kernel's cleaner to drop every destroyed
// subvolume, then empties the trash and sweeps the qgroups due to go.
func settle(t *testing.T, p *Pool, dir string) {
	t.Helper()
	if err := p.EmptyTrash(); err != nil {
		t.Fatal(err)
	}
	// A sync wakes the cleaner, which otherwise waits for the next
	// periodic commit; the subvolume sync waits until it has dropped them.
	btrfs(t, "filesystem", "sync", dir)
	btrfs(t, "subvolume", "sync", dir)
	if err := p.EmptyTrash(); err != nil {
		t.Fatal(err)
	}
	if names, _ := p.entries(qgroupsDir); len(names) != 0 {
		t.Errorf("qgroups still recorded as due to go: %v", names)
	}
}

// wantQgroups checks that the filesystem's qgroups are exactly base plus
// those of the pool's live volumes.
func wantQgroups(t *testing.T, p *Pool, base []string, when string) {
	t.Helper()
	want := slices.Clone(base)
	for _, v := range p.vols.List() {
		want = append(want, fmt.Sprintf("0_%d", v.Subvolume))
		if v.Group != 0 {
			want = append(want, fmt.Sprintf("1_%d", v.Group))
		}
	}
	slices.Sort(want)
	got := qgroups(t, p)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("%s: qgroups %v, want %v (the filesystem's own and the live volumes')", when, got, want)
	}
}

// Deleting volumes, nested subvolumes and all, leaves no qgroup of
// theirs behind, in either quota mode; a qgroup the pool did not make (an
// operator's) is never touched.
func TestDeleteReleasesQgroups(t *testing.T) {
	for _, m := range quotaModes {
		t.Run(m.name, func(t *testing.T) {
			p, dir := newPoolIn(t, m.before)
			btrfs(t, "qgroup", "create", "1/9999", dir) // not the pool's
			base := qgroups(t, p)
			if !slices.Contains(base, "1_9999") {
				t.Fatalf("qgroups %v", base)
			}
			var vols []Volume
			for i := range 3 {
				v := create(t, p, fmt.Sprintf("q%d", i), 16*mib, nil)
				vols = append(vols, v)
				if _, err := writeFile(filepath.Join(dir, v.Path, "f"), 4*mib); err != nil {
					t.Fatal(err)
				}
			}
			nestSubvolume(t, dir, vols[0], "inner")
			keep := create(t, p, "keep", 16*mib, nil)
			wantQgroups(t, p, append(slices.Clone(base), nestedQgroup(t, dir, vols[0], "inner")), "before the deletes")
			for _, v := range vols {
				if err := p.Delete(context.Background(), v.ID); err != nil {
					t.Fatal(err)
				}
			}
			settle(t, p, dir)
			wantQgroups(t, p, base, "after the deletes")
			if _, err := p.Record(keep.ID); err != nil {
				t.Error(err)
			}
		})
	}
}

// A delete killed after the subvolume went to the trash (its qgroups
// recorded as due to go) is finished by the next open's collector: no
// qgroup of it is left.
func TestKilledDeleteReleasesQgroupsLater(t *testing.T) {
	p, dir := newPool(t)
	base := qgroups(t, p)
	v := create(t, p, "k", 16*mib, nil)
	p.stopCollector()
	// The delete's steps up to its commit point, as a kill after them
	// leaves them: the subvolume in the trash, the record removed.
	if err := p.trash(v.Path, v); err != nil {
		t.Fatal(err)
	}
	if err := p.vols.Remove(v.ID); err != nil {
		t.Fatal(err)
	}
	closeOnce(p)
	if got := qgroups(t, p); len(got) <= len(base) {
		t.Fatalf("the interrupted delete released its qgroups already: %v", got)
	}
	p = openPool(t, dir)
	settle(t, p, dir)
	wantQgroups(t, p, base, "after the reopen")
}

// A collector pass that lands inside a delete, after the rename into the
// trash and before the record's removal (the collector runs beside
// deletes, and a kill can stop a delete there), destroys the subvolume
// while a record still names it. The qgroups it recorded as due to go
// are still swept once the kernel has dropped the subvolume: a record
// whose subvolume is not at its path does not keep them.
func TestCollectorDuringDeleteReleasesQgroups(t *testing.T) {
	for _, m := range quotaModes {
		t.Run(m.name, func(t *testing.T) {
			p, dir := newPoolIn(t, m.before)
			base := qgroups(t, p)
			v := create(t, p, "d", 16*mib, nil)
			p.stopCollector()
			if err := p.trash(v.Path, v); err != nil {
				t.Fatal(err)
			}
			// The collector's pass, the record still in place.
			if err := p.EmptyTrash(); err != nil {
				t.Fatal(err)
			}
			btrfs(t, "filesystem", "sync", dir)
			btrfs(t, "subvolume", "sync", dir)
			if err := p.EmptyTrash(); err != nil {
				t.Fatal(err)
			}
			// The rest of the delete.
			if err := p.Delete(context.Background(), v.ID); err != nil {
				t.Fatal(err)
			}
			settle(t, p, dir)
			wantQgroups(t, p, base, "after the delete")
		})
	}
}

// A pod can make a btrfs subvolume inside its volume; on simple quotas
// its data counts against the volume (the subvolume joins the volume's
// level-1 qgroup), so writing past the size through it gets EDQUOT, and
// the volume, full as it is, is deleted cleanly. On full qgroups the
// kernel does not count it: the pool says so.
func TestNestedSubvolumeCannotBypassTheQuota(t *testing.T) {
	for _, m := range quotaModes {
		t.Run(m.name, func(t *testing.T) {
			p, dir := newPoolIn(t, m.before)
			if p.NestedSubvolumesCounted() != (m.before == nil) {
				t.Fatalf("NestedSubvolumesCounted %t on %s quotas", p.NestedSubvolumesCounted(), m.name)
			}
			if !p.NestedSubvolumesCounted() {
				return // documented: docs/directory-volumes.md
			}
			base := qgroups(t, p)
			v := create(t, p, "n", 16*mib, nil)
			nestSubvolume(t, dir, v, "inner")
			n, err := writeFile(filepath.Join(dir, v.Path, "inner", "f"), 64*mib)
			if !errors.Is(err, syscall.EDQUOT) || n > 16*mib {
				t.Fatalf("wrote %d bytes into a 16 MiB volume through a nested subvolume: %v, want EDQUOT", n, err)
			}
			// The one below it joins the same group.
			if err := os.Remove(filepath.Join(dir, v.Path, "inner", "f")); err != nil {
				t.Fatal(err)
			}
			if err := p.SyncFS(); err != nil {
				t.Fatal(err)
			}
			nestSubvolume(t, dir, v, "inner/deeper")
			n, err = writeFile(filepath.Join(dir, v.Path, "inner", "deeper", "f"), 64*mib)
			if !errors.Is(err, syscall.EDQUOT) || n > 16*mib {
				t.Fatalf("wrote %d bytes through a subvolume two deep: %v, want EDQUOT", n, err)
			}
			if err := p.SyncFS(); err != nil {
				t.Fatal(err)
			}
			used, limit, err := p.Usage(v.ID)
			if err != nil || limit != 16*mib || used < 8*mib {
				t.Errorf("usage %d of %d (%v): the nested data is not the volume's", used, limit, err)
			}
			if err := p.Delete(context.Background(), v.ID); err != nil {
				t.Fatal(err)
			}
			settle(t, p, dir)
			wantQgroups(t, p, base, "after deleting the full volume")
		})
	}
}

// nestSubvolume makes the subvolume rel inside the volume, as a pod can.
func nestSubvolume(t *testing.T, dir string, v Volume, rel string) {
	t.Helper()
	parent, name := filepath.Split(filepath.Join(dir, v.Path, rel))
	fd, err := unix.Open(parent, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := createSubvolume(fd, name); err != nil {
		t.Fatal(err)
	}
}

func nestedQgroup(t *testing.T, dir string, v Volume, rel string) string {
	t.Helper()
	fd, err := unix.Open(filepath.Join(dir, v.Path, rel), unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	id, err := subvolumeID(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("0_%d", id)
}
