package dirpool

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/dirpool/dirpooltest"
	"github.com/filevol/filevol/internal/testutil"
	"github.com/filevol/filevol/internal/volume"
)

// killChildEnv makes the test binary a worker that creates and deletes
// volumes in the pool it names until it is killed (TestKillDuringCreateAndDelete).
const killChildEnv = "FILEVOL_DIRPOOL_KILL_CHILD"

func TestMain(m *testing.M) {
	if dir := os.Getenv(killChildEnv); dir != "" {
		killChild(dir)
		return
	}
	os.Exit(m.Run())
}

// killChild creates, fills and deletes volumes as fast as it can; a kill
// lands anywhere in Create or Delete.
func killChild(dir string) {
	p, err := Open(dir, Options{NodeID: "n1"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx := context.Background()
	// allowUnenforcedSize: the same worker runs on plain pools (ext4); on
	// btrfs the size is enforced anyway.
	params := map[string]string{ParamBasePath: "k", ParamGIDRangeStart: "1000", ParamGIDRangeEnd: "1063", ParamAllowUnenforcedSize: "true"}
	for i := 0; ; i++ {
		name := fmt.Sprintf("v%d-%d", os.Getpid(), i)
		if _, err := p.Create(ctx, volume.CreateRequest{Name: name, CapacityBytes: 8 * mib, Parameters: params}); err == nil {
			v, _ := p.Record(p.VolumeID(name))
			_ = os.WriteFile(filepath.Join(dir, v.Path, "f"), make([]byte, 64<<10), 0o644)
		}
		if vols := p.List(); len(vols) > 8 {
			_ = p.Delete(ctx, vols[rand.IntN(len(vols))].ID)
		}
	}
}

// A kill at any point of a create or a delete leaves either the volume or
// nothing: after each kill the next open finds every record with its
// subvolume in place, nothing in tmp, no subvolume that no record names,
// gids unique, and the trash emptied by the collector.
func TestKillDuringCreateAndDelete(t *testing.T) {
	first, dir := newPool(t)
	base := qgroups(t, first)
	killRepeatedly(t, first, dir)
	// No qgroup of a volume the kills deleted, or whose create they
	// undid, is left: only the filesystem's own and the live volumes'.
	p := openPool(t, dir)
	settle(t, p, dir)
	wantQgroups(t, p, base, "after the kills")
}

// The same on a plain pool (ext4: no quota, sizes unenforced).
func TestKillDuringCreateAndDeleteOnAPlainPool(t *testing.T) {
	dir := dirpooltest.Filesystem(t, testutil.Scratch(t, "dirpool-kill-ext4"), 512<<20, "ext4")
	killRepeatedly(t, openPool(t, dir), dir)
}

// killRepeatedly kills a worker creating and deleting volumes in the
// pool at dir at random points, and checks the invariants after each.
func killRepeatedly(t *testing.T, first *Pool, dir string) {
	// The worker and the checks below must each hold the pool alone to
	// repair it at open.
	first.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	kills := 12
	if testing.Short() {
		kills = 4
	}
	for i := range kills {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), killChildEnv+"="+dir)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(100+rng.IntN(400)) * time.Millisecond)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()

		p, err := Open(dir, Options{NodeID: "n1"})
		if err != nil {
			t.Fatalf("kill %d: open: %v", i, err)
		}
		if err := p.EmptyTrash(); err != nil {
			t.Errorf("kill %d: empty trash: %v", i, err)
		}
		checkInvariants(t, p, dir, fmt.Sprintf("after kill %d", i))
		p.Close()
	}
}

func checkInvariants(t *testing.T, p *Pool, dir, when string) {
	t.Helper()
	paths := map[string]bool{}
	gids := map[uint32]string{}
	for _, v := range p.vols.List() {
		fd, err := p.openVolume(v)
		if err != nil {
			t.Errorf("%s: volume %s has no subvolume at %s: %v", when, v.ID, v.Path, err)
			continue
		}
		unix.Close(fd)
		paths[v.Path] = true
		if other, dup := gids[v.GID]; dup {
			t.Errorf("%s: gid %d held by %s and %s", when, v.GID, other, v.ID)
		}
		gids[v.GID] = v.ID
	}
	for _, sub := range []string{tmpDir, trashDir, destroyingDir} {
		if ents, _ := os.ReadDir(filepath.Join(dir, metaDir, sub)); len(ents) != 0 {
			t.Errorf("%s: left in %s: %d entries", when, sub, len(ents))
		}
	}
	// Every directory under the base path is a recorded volume's (on a
	// plain pool nothing else tells a volume's directory apart).
	ents, err := os.ReadDir(filepath.Join(dir, "k"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !paths["k/"+e.Name()] {
			t.Errorf("%s: k/%s has no record", when, e.Name())
		}
	}
}
