//go:build linux

package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/testutil/gluster"
)

// Loop devices left on a dead GlusterFS client's files (a node killed with a
// volume staged and revived without a reboot) have no device or inode to
// show, and a path relative to the dead mount ("/volumes/<id>.img"). down.sh
// detaches the one whose path names a file of its own brick
// ($STATE_DIR/gluster/brick), and names the other on stderr, attached: it
// cannot prove it is the harness's.
func TestDownDetachesDeadClientDevicesOfItsBrick(t *testing.T) {
	h := newHarness(t)
	g := gluster.Start(t)
	args := gluster.CoherentClientArgs
	mnt := g.MountNode(t, "n3", args...)
	vols := filepath.Join(mnt, "volumes")
	brick := filepath.Join(h.state, "gluster", "brick", "volumes")
	for _, d := range []string{vols, brick} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	names := []string{"fv1-img-8f7231dd-0123456789abcdef0123456789abcdef.img", "fv1-img-8f7231dd-fedcba9876543210fedcba9876543210.img"}
	// The first is an image of our brick (only its name matters to down.sh).
	if err := os.WriteFile(filepath.Join(brick, names[0]), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var devs []loop.Device
	for _, n := range names {
		img := filepath.Join(vols, n)
		if err := os.WriteFile(img, make([]byte, 1<<20), 0o644); err != nil {
			t.Fatal(err)
		}
		d, err := loop.Attach(t.Context(), img, loop.Options{})
		if err != nil {
			t.Fatal(err)
		}
		devs = append(devs, d)
	}
	t.Cleanup(func() {
		for i, d := range devs {
			if x, ok := shown(t, d); ok {
				if err := loop.DetachUnreachable(x); err != nil {
					t.Logf("detach %s (%s): %v", d.Path, names[i], err)
				}
			}
		}
	})
	g.KillClient(t, "n3")
	g.RestartClient(t, "n3", args...)
	for _, d := range devs {
		if x, ok := shown(t, d); !ok || !loop.Unreachable(x) || !strings.HasPrefix(x.BackingFile, "/volumes/") {
			t.Fatalf("%s after its client died: %q (attached %v, unreachable %v)", d.Path, x.BackingFile, ok, loop.Unreachable(x))
		}
	}
	code, out := h.run(t, "down.sh")
	if code != 0 {
		t.Errorf("down.sh exited %d", code)
	}
	if _, ok := shown(t, devs[0]); ok {
		t.Errorf("%s, on a file of our brick, is still attached", devs[0].Path)
	}
	if _, ok := shown(t, devs[1]); !ok {
		t.Errorf("%s, on a file no path of ours names, was detached", devs[1].Path)
	}
	if !strings.Contains(out, devs[1].Path+" /volumes/"+names[1]) {
		t.Errorf("down.sh did not name %s, left attached", devs[1].Path)
	}
}

// shown returns d as the kernel shows it now, if the same number is still
// attached to a file of the same name.
func shown(t *testing.T, d loop.Device) (loop.Device, bool) {
	t.Helper()
	all, err := loop.List()
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range all {
		if x.Path == d.Path && filepath.Base(x.BackingFile) == filepath.Base(d.BackingFile) {
			return x, true
		}
	}
	return loop.Device{}, false
}
