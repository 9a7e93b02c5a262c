package dirpool

import (
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/dirpool/dirpooltest"
)

// The root tree and the quota tree say where a pod's subvolumes are and
// which groups hold them, whatever the pod named them or asked for: an
// ordinary nested subvolume joins its volume's group, an escaped one
// (empty inherit list) joins none, and each is reached by handle.
func TestTreesPlaceAPodsSubvolumes(t *testing.T) {
	p, _ := newPool(t)
	v := create(t, p, "v", 16*mib, nil)
	vfd, err := p.openVolume(v)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(vfd)
	if err := unix.Mkdirat(vfd, "d", 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := openBeneath(vfd, "d")
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(d)
	if err := createSubvolume(vfd, "plain"); err != nil {
		t.Fatal(err)
	}
	var podErr error
	dirpooltest.AsPod(t, dirpooltest.ContainerCaps, func() {
		podErr = dirpooltest.EscapeSubvolume(d, "esc", nil, -1)
	})
	if podErr != nil {
		t.Fatal(podErr)
	}
	refs, err := subvolumeRefs(p.root)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]subvolRef{}
	for _, r := range refs {
		byName[r.name] = r
	}
	var st unix.Stat_t
	if err := unix.Fstat(d, &st); err != nil {
		t.Fatal(err)
	}
	esc, plain := byName["esc"], byName["plain"]
	if esc.parent != v.Subvolume || esc.dir != st.Ino || plain.parent != v.Subvolume || plain.dir != firstFreeObjectID {
		t.Fatalf("refs %+v, want esc in dir %d and plain in the root of subvolume %d", refs, st.Ino, v.Subvolume)
	}
	parents, err := qgroupParents(p.root)
	if err != nil {
		t.Fatal(err)
	}
	if got := parents[plain.id]; !slices.Equal(got, []uint64{qgroupID(1, v.Group)}) {
		t.Errorf("the plain nested subvolume's groups %v, want 1/%d", got, v.Group)
	}
	if got := parents[esc.id]; len(got) != 0 {
		t.Errorf("the escaped subvolume's groups %v, want none (the hole this guards against)", got)
	}
	h, err := openByHandle(p.root, esc.parent, esc.dir)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(h)
	var hst unix.Stat_t
	if err := unix.Fstat(h, &hst); err != nil || hst.Ino != st.Ino || hst.Dev != st.Dev {
		t.Errorf("opened by handle: inode %d dev %d (%v), want %d %d", hst.Ino, hst.Dev, err, st.Ino, st.Dev)
	}
}
