package ceph_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/filevol/filevol/internal/dirpool"
	"github.com/filevol/filevol/internal/volume"
)

// cloneChildEnv makes the test binary a worker that clones the volume
// "src" of the directory pool it names into "clone" and then waits to be
// killed.
const cloneChildEnv = "FILEVOL_CEPH_CLONE_CHILD"

func cloneChild(dir string) {
	p, err := dirpool.Open(dir, dirpool.Options{NodeID: "node-a", GuardInterval: -1})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Println("open")
	_, err = p.Create(context.Background(), volume.CreateRequest{Name: "clone", CapacityBytes: 64 * mib,
		Source: &volume.ContentSource{Kind: volume.SourceVolume, ID: p.VolumeID("src")}})
	fmt.Fprintln(os.Stderr, "the clone finished before the kill:", err)
	os.Exit(3)
}

// A filevol killed (SIGKILL) while it copies a clone leaves, after the
// next open, no volume, no record, nothing in tmp/ and no snapshot in
// the source's .snap; the clone retried then succeeds.
func TestDirectoryCloneKilledOnCephFS(t *testing.T) {
	_, a, _ := twoNodes(t)
	p, closePool := openDirPool(t, a)
	src := dirVolume(t, p, "src", 64*mib, nil)
	for i := range 200 {
		if err := os.WriteFile(filepath.Join(a, src.Path, fmt.Sprintf("f%03d", i)), []byte("to copy"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	closePool()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), cloneChildEnv+"="+a)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // it dies with this test
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := out.Read(make([]byte, 5)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(700 * time.Millisecond) // the open and the snapshot take about 0.2 s, 200 files 1.5-3 s
	_ = cmd.Process.Kill()
	err = cmd.Wait()
	if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the worker was not killed mid-copy: %v", err)
	}
	left, _ := os.ReadDir(filepath.Join(a, ".filevol", "tmp"))
	snaps := snapNames(t, filepath.Join(a, src.Path))
	t.Logf("the kill left %d entries in tmp and %v in the source's .snap", len(left), snaps)
	if len(left) != 1 || len(snaps) != 1 {
		t.Errorf("the kill did not land mid-copy: tmp %d, .snap %v", len(left), snaps)
	}

	p, _ = openDirPool(t, a)
	if _, err := p.Record(p.VolumeID("clone")); !errors.Is(err, volume.ErrNotFound) {
		t.Errorf("the killed clone's record: %v", err)
	}
	if left, _ := os.ReadDir(filepath.Join(a, ".filevol", "tmp")); len(left) != 0 {
		t.Errorf("tmp after the repair: %d entries", len(left))
	}
	if snaps := snapNames(t, filepath.Join(a, src.Path)); len(snaps) != 0 {
		t.Errorf("the source's .snap after the repair: %v", snaps)
	}
	c := dirVolume(t, p, "clone", 64*mib, &volume.ContentSource{Kind: volume.SourceVolume, ID: src.ID})
	sameTree(t, filepath.Join(a, src.Path), filepath.Join(a, c.Path))
}
