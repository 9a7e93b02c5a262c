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
