package dirpool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/dirpool/dirpooltest"
	"github.com/filevol/filevol/internal/testutil"
	"github.com/filevol/filevol/internal/volume"
)

const mib = 1 << 20

// newPool opens a directory pool on a fresh btrfs of its own.
func newPool(t *testing.T) (*Pool, string) {
	t.Helper()
	dir := dirpooltest.Btrfs(t, testutil.Scratch(t, "dirpool"), 1<<30)
	return openPool(t, dir), dir
}

func openPool(t *testing.T, dir string) *Pool {
	t.Helper()
	p, err := Open(dir, Options{NodeID: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeOnce(p) })
	return p
}

func closeOnce(p *Pool) {
	select {
	case <-p.done:
	default:
		_ = p.Close()
	}
}

func create(t testing.TB, p *Pool, name string, size int64, params map[string]string) Volume {
	t.Helper()
	if _, err := p.Create(context.Background(), volume.CreateRequest{Name: name, CapacityBytes: size, Parameters: params}); err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	v, err := p.Record(p.VolumeID(name))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// writeFile writes n bytes to path in 1 MiB chunks and fsyncs; it returns
// how many were written and the first error.
func writeFile(path string, n int64) (int64, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, mib)
	for i := range buf {
		buf[i] = byte(i*7 + 1)
	}
	var done int64
	for done < n {
		w, err := f.Write(buf[:min(int64(len(buf)), n-done)])
		done += int64(w)
		if err != nil {
			return done, err
		}
	}
	return done, f.Sync()
}

// The claim's size is real: writes past it get EDQUOT; an expansion
// raises the limit online and the same volume takes more; usage is the
// qgroup's.
func TestQuotaEnforcedAndGrownOnline(t *testing.T) {
	p, dir := newPool(t)
	v := create(t, p, "q", 32*mib, nil)
	path := filepath.Join(dir, v.Path)
	n, err := writeFile(filepath.Join(path, "a"), 64*mib)
	if !errors.Is(err, syscall.EDQUOT) {
		t.Fatalf("wrote %d bytes of 64 MiB into a 32 MiB volume: %v, want EDQUOT", n, err)
	}
	if n > 33*mib {
		t.Errorf("wrote %d bytes into a 32 MiB volume", n)
	}
	if err := p.SyncFS(); err != nil {
		t.Fatal(err)
	}
	used, limit, err := p.Usage(v.ID)
	if err != nil || limit != 32*mib || used < 16*mib || used > 33*mib {
		t.Errorf("Usage = %d used, %d limit, %v; want about 32 MiB of 32 MiB", used, limit, err)
	}
	if _, err := p.Expand(context.Background(), v.ID, 128*mib, 128*mib); err != nil {
		t.Fatal(err)
	}
	if n, err := writeFile(filepath.Join(path, "b"), 48*mib); err != nil {
		t.Errorf("after growing to 128 MiB, wrote %d of 48 MiB more: %v", n, err)
	}
	if _, limit, _ := p.Usage(v.ID); limit != 128*mib {
		t.Errorf("limit after expansion = %d", limit)
	}
	if _, err := p.Expand(context.Background(), v.ID, 64*mib, 0); !errors.Is(err, volume.ErrShrink) {
		t.Errorf("shrink: %v, want ErrShrink", err)
	}
	// The expansion survives a restart.
	p.Close()
	p = openPool(t, dir)
	if got, _ := p.Get(v.ID); got.CapacityBytes != 128*mib {
		t.Errorf("after reopen the volume has %d bytes", got.CapacityBytes)
	}
}

// uid, gid and directoryPerms are what a process in the volume sees: the
// owner writes, another uid outside the group does not.
func TestOwnershipAsAProcessSeesIt(t *testing.T) {
	p, dir := newPool(t)
	v := create(t, p, "own", 16*mib, map[string]string{ParamUID: "1234", ParamGID: "5678", ParamDirectoryPerms: "750"})
	path := filepath.Join(dir, v.Path)
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid != 1234 || st.Gid != 5678 || st.Mode&0o7777 != 0o750 {
		t.Errorf("directory is %d:%d %o, want 1234:5678 750", st.Uid, st.Gid, st.Mode&0o7777)
	}
	// The process reaches the volume through a descriptor, as a pod does
	// through its bind mount: the scratch directories above are root's.
	vdir, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer vdir.Close()
	as := func(uid, gid uint32, file string) error {
		cmd := exec.Command("/bin/sh", "-c", `echo hi > "/proc/self/fd/3/$0"`, file)
		cmd.ExtraFiles = []*os.File{vdir}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	}
	if err := as(1234, 5678, "mine"); err != nil {
		t.Errorf("the owner cannot write: %v", err)
	}
	if err := as(4321, 4321, "theirs"); err == nil {
		t.Error("another uid wrote into a 750 directory")
	}
	// Without uid and gid, a gid is allocated and the uid is the gid (EFS).
	a := create(t, p, "alloc", 16*mib, map[string]string{ParamGIDRangeStart: "7000", ParamGIDRangeEnd: "7010"})
	if a.GID != 7000 || a.UID != 7000 || !a.GIDAllocated {
		t.Errorf("allocated %d:%d (allocated %t), want 7000:7000", a.UID, a.GID, a.GIDAllocated)
	}
	if err := unix.Stat(filepath.Join(dir, a.Path), &st); err != nil || st.Uid != 7000 || st.Gid != 7000 || st.Mode&0o777 != DefaultDirectoryPerms {
		t.Errorf("allocated volume's directory: %d:%d %o, %v", st.Uid, st.Gid, st.Mode&0o7777, err)
	}
}

// gids are unique among the live volumes at any count, reused after a
// delete, kept across a restart, and a used-up range is refused naming it.
func TestGIDRangeUniqueDurableAndExhausted(t *testing.T) {
	p, dir := newPool(t)
	params := map[string]string{ParamGIDRangeStart: "100000", ParamGIDRangeEnd: "101099"}
	seen := map[uint32]string{}
	// 1100 live volumes, as their records (the allocator reads nothing
	// else); the subvolumes are not needed for the allocation.
	for i := range 1100 {
		gid, allocated, err := p.reserveGID(mustParams(t, params))
		if err != nil || !allocated {
			t.Fatalf("allocation %d: %v", i, err)
		}
		if other, dup := seen[gid]; dup {
			t.Fatalf("gid %d handed out twice (%s)", gid, other)
		}
		id := p.VolumeID(fmt.Sprint("v", i))
		seen[gid] = id
		commitRecord(t, p, Volume{Version: recordVersion, ID: id, Name: fmt.Sprint("v", i), CapacityBytes: mib, GID: gid, GIDAllocated: true, Path: "x"})
		p.releaseReservation(gid, true)
	}
	_, err := p.Create(context.Background(), volume.CreateRequest{Name: "full", CapacityBytes: mib, Parameters: params})
	if !errors.Is(err, ErrGIDRangeExhausted) || !strings.Contains(err.Error(), "100000..101099") {
		t.Fatalf("create in a used-up range: %v, want ErrGIDRangeExhausted naming the range", err)
	}
	// Restart: the records are the allocation.
	p.Close()
	p = openPool(t, dir)
	if _, _, err := p.reserveGID(mustParams(t, params)); !errors.Is(err, ErrGIDRangeExhausted) {
		t.Fatalf("after a restart the used-up range allocated: %v", err)
	}
	// A changed range is honoured at the next create.
	v := create(t, p, "wider", 16*mib, map[string]string{ParamGIDRangeStart: "100000", ParamGIDRangeEnd: "101100"})
	if v.GID != 101100 {
		t.Errorf("widened range gave gid %d, want 101100", v.GID)
	}
	// A deleted volume's gid is free again.
	if err := p.vols.Remove(seen[100500]); err != nil {
		t.Fatal(err)
	}
	if gid, _, err := p.reserveGID(mustParams(t, params)); err != nil || gid != 100500 {
		t.Errorf("after a delete: gid %d, %v; want 100500", gid, err)
	}
}

func mustParams(t *testing.T, m map[string]string) Params {
	t.Helper()
	p, err := Parameters(m)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func commitRecord(t *testing.T, p *Pool, v Volume) {
	t.Helper()
	d, err := p.vols.Prepare(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := d.Durable(); err != nil {
		t.Fatal(err)
	}
}

// Two processes with the pool open, as two controller replicas are on a
// shared pool (one leads, then the other): each create's gid is unique
// among every live volume, including those the other made after this one
// loaded its index, and a gid the other freed is handed out again.
func TestGIDUniqueAcrossProcessesSharingThePool(t *testing.T) {
	a, dir := newPool(t)
	b := openPool(t, dir)
	params := map[string]string{ParamGIDRangeStart: "3000", ParamGIDRangeEnd: "3999"}
	gids := map[uint32]string{}
	for i := range 6 {
		p := a
		if i%2 == 1 {
			p = b
		}
		v := create(t, p, fmt.Sprint("leader-", i), 8*mib, params)
		if other, dup := gids[v.GID]; dup {
			t.Fatalf("gid %d of %s was handed out already to %s by the other replica", v.GID, v.Name, other)
		}
		gids[v.GID] = v.Name
	}
	first, err := a.Record(a.VolumeID("leader-0"))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Delete(context.Background(), first.ID); err != nil {
		t.Fatal(err)
	}
	if v := create(t, b, "after-delete", 8*mib, params); v.GID != first.GID {
		t.Errorf("gid %d after the other replica deleted the holder of %d", v.GID, first.GID)
	}
}
