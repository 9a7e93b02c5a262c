package csi

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/filevol/filevol/internal/volid"
	"github.com/filevol/filevol/internal/volume"
)

func TestRoutes(t *testing.T) {
	const local, shared = "3f9a0c2e", "0000fa4e"
	img, dir, sharedImg := "local img", "local dir", "shared img"
	var r routes[*string]
	r.add(local, volid.KindImage, &img)
	r.add(local, "dir", &dir)
	r.add(shared, volid.KindImage, &sharedImg)
	r.addLegacy(local)

	for id, want := range map[string]*string{
		volid.NewVolume(volid.KindImage, local, "n"):  &img,
		volid.NewVolume("dir", local, "n"):            &dir,
		volid.NewVolume(volid.KindImage, shared, "n"): &sharedImg,
		volid.LegacyVolume("n"):                       &img, // version 0: the node-local pool's images
	} {
		if got, err := r.volume(id); err != nil || got != want {
			t.Errorf("volume(%s) = %v, %v; want %s", id, got, err, *want)
		}
	}
	for id, want := range map[string]*string{
		volid.NewSnapshot(local, "s"):  &img, // a pool's first registration holds its snapshots
		volid.NewSnapshot(shared, "s"): &sharedImg,
		volid.LegacySnapshot("s"):      &img,
	} {
		if got, err := r.snapshot(id); err != nil || got != want {
			t.Errorf("snapshot(%s) = %v, %v; want %s", id, got, err, *want)
		}
	}
	if len(r.all) != 3 || r.all[0] != &img {
		t.Errorf("all = %v, want each registration once, the first first", r.all)
	}

	// Not served here: NOT_FOUND, as a missing volume of a served pool.
	_, err := r.volume(volid.NewVolume("dir", shared, "n"))
	if !errors.Is(err, volume.ErrNotFound) || codeOf(err) != codes.NotFound ||
		!strings.Contains(err.Error(), "dir volumes of pool 3f9a0c2e, img volumes of pool 0000fa4e, img volumes of pool 3f9a0c2e") {
		t.Errorf("volume of a kind not served in that pool: %v", err)
	}
	if _, err := r.snapshot(volid.NewSnapshot("0badc0de", "s")); !errors.Is(err, volume.ErrSnapshotNotFound) {
		t.Errorf("snapshot of a pool not served: %v", err)
	}
	// Malformed: NOT_FOUND too, and never a route.
	for _, id := range []string{"fv1-img-../../-x", "reallyfakevolumeid", "fv1-IMG-" + local + "-" + strings.Repeat("0", 32)} {
		if _, err := r.volume(id); codeOf(err) != codes.NotFound || errors.Is(err, volume.ErrNotFound) {
			t.Errorf("volume(%q) = %v, want NOT_FOUND for a malformed ID", id, err)
		}
	}
	if _, err := r.volume(""); codeOf(err) != codes.InvalidArgument {
		t.Errorf("volume(\"\") = %v, want INVALID_ARGUMENT", err)
	}

	defer func() {
		if recover() == nil {
			t.Error("a route registered twice did not panic")
		}
	}()
	r.add(local, volid.KindImage, &dir)
}
