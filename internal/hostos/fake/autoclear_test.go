package fake

import (
	"context"
	"strings"
	"testing"

	"github.com/filevol/filevol/internal/hostos/loop"
)

// An operator's losetup -d of a device that a mount and a process hold
// only marks it (Detaching); Holders names both; it goes once the last of
// them lets go. One nothing holds goes at once.
func TestLosetupDetachWaitsForTheLastHolder(t *testing.T) {
	h, img, dir, _ := scene(t)
	ctx := context.Background()
	d, err := h.Attach(ctx, img, loop.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Format(ctx, d.Path, "ext4"); err != nil {
		t.Fatal(err)
	}
	if err := h.Mount(d.Path, dir, "ext4", nil); err != nil {
		t.Fatal(err)
	}
	h.HoldOpen(d.Path)
	h.LosetupDetach(d.Path)
	devs, _ := h.Find(img)
	if len(devs) != 1 || !devs[0].Detaching {
		t.Fatalf("after losetup -d of a held device: %+v, want it there and Detaching", devs)
	}
	if got := h.Holders(d.Path); !strings.Contains(got, "mounted at "+dir) || !strings.Contains(got, "open by 1 process(es)") {
		t.Errorf("Holders = %q, want its mount and its process", got)
	}
	h.Release(d.Path)
	if devs, _ := h.Find(img); len(devs) != 1 {
		t.Fatalf("the process let go but the mount holds it: %+v, want it still there", devs)
	}
	if err := h.UnmountAll(dir); err != nil {
		t.Fatal(err)
	}
	if devs, _ := h.Find(img); len(devs) != 0 {
		t.Errorf("devices left after the last holder let go: %+v", devs)
	}
	e, err := h.Attach(ctx, img, loop.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h.LosetupDetach(e.Path)
	if devs, _ := h.Find(img); len(devs) != 0 {
		t.Errorf("losetup -d of a device nothing holds left %+v", devs)
	}
}
