package loop_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/filevol/filevol/internal/hostos/loop"
)

// TestGetReadsOneDeviceAsFindDoes: Get of a device backed by the file
// answers what Find answers for it, by either name; another file's, a
// detached device and a deleted image are told apart as Find tells them.
func TestGetReadsOneDeviceAsFindDoes(t *testing.T) {
	dir := setup(t)
	img := newImage(t, dir, "v.img", 1<<20)
	other := newImage(t, dir, "w.img", 1<<20)
	d := mustAttach(t, img, loop.Options{ReadOnly: true})
	name := filepath.Base(d.Path)

	for _, n := range []string{d.Path, name} {
		got, ok, err := loop.Get(n, img)
		if err != nil || !ok || got != mustFind(t, img)[0] {
			t.Errorf("Get(%s, image) = %+v, %v, %v; want %+v", n, got, ok, err, mustFind(t, img)[0])
		}
	}
	if got, ok, err := loop.Get(name, other); ok || err != nil {
		t.Errorf("Get(%s, another file) = %+v, %v, %v; want not found", name, got, ok, err)
	}
	if _, ok, err := loop.Get("sda", img); ok || !errors.Is(err, loop.ErrNotFound) {
		t.Errorf("Get(sda) = %v, %v; want ErrNotFound", ok, err)
	}
	if got, ok := loop.NameOf(d.Major, d.Minor); !ok || got != name {
		t.Errorf("NameOf(%d:%d) = %q, %v; want %s", d.Major, d.Minor, got, ok, name)
	}
	if got, ok := loop.NameOf(1, 3); ok { // 1:3 is /dev/null, a character device
		t.Errorf("NameOf(1:3) = %q, want none", got)
	}

	if err := os.Remove(img); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := loop.Get(name, img); err != nil || !ok || !got.Deleted {
		t.Errorf("Get after unlink = %+v, %v, %v; want the device, Deleted", got, ok, err)
	}
	if err := loop.Detach(d.Path); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := loop.Get(name, img); ok || err != nil {
		t.Errorf("Get of a detached device = %+v, %v, %v; want not found", got, ok, err)
	}
}
