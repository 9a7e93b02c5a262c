package nodestate

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/testutil"
)

var errBadID = errors.New("bad ID")

func validTestID(id string) error {
	if !strings.HasPrefix(id, "fv-") || strings.ContainsAny(id, "/.\x00") {
		return fmt.Errorf("%w: %q", errBadID, id)
	}
	return nil
}

// openAt makes <dir>/volumes (the pool's) and opens the state there.
func openAt(t *testing.T, dir string) *State {
	t.Helper()
	if err := os.MkdirAll(dir+"/volumes", 0o700); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir, validTestID)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestMarkers(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir)
	// The paths every earlier build used.
	for m, path := range map[*Marker]string{
		s.Format: dir + "/volumes/fv-1.formatting",
		s.Grow:   dir + "/volumes/fv-1.growing",
		s.Frozen: dir + "/frozen/fv-1",
	} {
		if m.IsSet("fv-1") {
			t.Errorf("%s set before Set", path)
		}
		if err := m.Set("fv-1"); err != nil {
			t.Fatal(err)
		}
		if err := m.Set("fv-1"); err != nil {
			t.Errorf("second Set of %s: %v", path, err)
		}
		if fi, err := os.Stat(path); err != nil || fi.Size() != 0 {
			t.Errorf("marker at %s: %v (want an empty file)", path, err)
		}
		if !m.IsSet("fv-1") || m.IsSet("fv-2") {
			t.Errorf("%s: IsSet wrong", path)
		}
		if err := m.Clear("fv-1"); err != nil || m.IsSet("fv-1") {
			t.Errorf("Clear %s: %v, still set %v", path, err, m.IsSet("fv-1"))
		}
		if err := m.Clear("fv-1"); err != nil {
			t.Errorf("Clear of no marker at %s: %v", path, err)
		}
		if err := m.Set("../fv-1"); !errors.Is(err, errBadID) {
			t.Errorf("Set of a bad ID = %v", err)
		}
		if m.IsSet("../x") {
			t.Error("IsSet of a bad ID")
		}
	}
}

func TestFrozenMarksAndNames(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir)
	for _, id := range []string{"fv-a", "fv-b"} {
		if err := s.Frozen.Set(id); err != nil {
			t.Fatal(err)
		}
	}
	// Not a mark: names that are no volume ID.
	if err := os.WriteFile(dir+"/frozen/README", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := s.Frozen.IDs()
	slices.Sort(got)
	if err != nil || !slices.Equal(got, []string{"fv-a", "fv-b"}) {
		t.Errorf("Frozen.IDs = %v, %v", got, err)
	}

	for name, want := range map[string]bool{
		"fv-a.formatting": true, "fv-a.growing": true,
		"fv-a.json": false, "fv-a.img": false, "x.formatting": false, ".formatting": false,
	} {
		if s.VolumeMarker(name) != want {
			t.Errorf("VolumeMarker(%q) = %v", name, !want)
		}
	}

	if err := s.Format.Set("fv-a"); err != nil {
		t.Fatal(err)
	}
	if err := s.Grow.Set("fv-a"); err != nil {
		t.Fatal(err)
	}
	s.ForgetVolume("fv-a")
	if s.Format.IsSet("fv-a") || s.Grow.IsSet("fv-a") || !s.Frozen.IsSet("fv-a") {
		t.Error("ForgetVolume: wrong markers left")
	}
}

// A marker the pool's filesystem has no room for is ErrNoSpace (the CO is
// told RESOURCE_EXHAUSTED, not INTERNAL).
func TestMarkerNoSpace(t *testing.T) {
	testutil.RequireRoot(t)
	dir := testutil.Scratch(t, "nodestate")
	// Room for the directories and a few files only.
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m,nr_inodes=8"); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, 0) })
	s := openAt(t, dir)
	var err error
	for i := 0; i < 16 && err == nil; i++ {
		err = s.Format.Set(fmt.Sprintf("fv-%d", i))
	}
	if !errors.Is(err, ErrNoSpace) || !errors.Is(err, unix.ENOSPC) {
		t.Errorf("Set with no inode left = %v, want ErrNoSpace wrapping ENOSPC", err)
	}
}

// On a shared pool each node's freeze marks are its own: a node lists,
// and clears, only the marks it set. The format and grow markers stay
// beside the volume, where any node that stages it sees them.
func TestSharedPoolKeepsEachNodesFreezeMarks(t *testing.T) {
	dir := t.TempDir()
	openAt(t, dir) // the pool's volumes/
	shared := func(node string) *State {
		s, err := OpenShared(dir, dir+"/owners/"+node, validTestID)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a, b := shared("aaaa"), shared("bbbb")
	if err := a.Frozen.Set("fv-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir + "/owners/aaaa/frozen/fv-1"); err != nil {
		t.Fatalf("a's mark is not in a's directory: %v", err)
	}
	if ids, err := b.Frozen.IDs(); err != nil || len(ids) != 0 {
		t.Errorf("b's marks = %v, %v: b sees a's", ids, err)
	}
	if b.Frozen.IsSet("fv-1") {
		t.Error("b reads a's mark as its own")
	}
	if err := b.Frozen.Clear("fv-1"); err != nil || !a.Frozen.IsSet("fv-1") {
		t.Errorf("b's Clear dropped a's mark (%v)", err)
	}
	if err := a.Format.Set("fv-1"); err != nil {
		t.Fatal(err)
	}
	if !b.Format.IsSet("fv-1") || a.Format.Path("fv-1") != dir+"/volumes/fv-1.formatting" {
		t.Error("the format marker is not beside the volume, where every node sees it")
	}
}

// A shared pool that was node-local once: the marks of its node-local
// layout are adopted by the node they are, and only by it; the rest stay.
func TestSharedPoolAdoptsLegacyFreezeMarks(t *testing.T) {
	dir := t.TempDir()
	local := openAt(t, dir)
	for _, id := range []string{"fv-mine", "fv-theirs", "fv-both"} {
		if err := local.Frozen.Set(id); err != nil {
			t.Fatal(err)
		}
	}
	s, err := OpenShared(dir, dir+"/owners/aaaa", validTestID)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Frozen.Set("fv-both"); err != nil {
		t.Fatal(err)
	}
	if err := s.AdoptLegacyFrozen(func(id string) bool { return id != "fv-theirs" }); err != nil {
		t.Fatal(err)
	}
	got, _ := s.Frozen.IDs()
	slices.Sort(got)
	if !slices.Equal(got, []string{"fv-both", "fv-mine"}) {
		t.Errorf("own marks after adoption = %v", got)
	}
	left, _ := local.Frozen.IDs()
	if !slices.Equal(left, []string{"fv-theirs"}) {
		t.Errorf("node-local layout after adoption holds %v, want another node's mark only", left)
	}
	// On a node-local pool there is nothing to adopt.
	if err := local.AdoptLegacyFrozen(func(string) bool { return true }); err != nil || !local.Frozen.IsSet("fv-theirs") {
		t.Errorf("AdoptLegacyFrozen on a node-local pool: %v", err)
	}
}
