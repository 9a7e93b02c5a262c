package pool

import (
	"testing"

	"github.com/filevol/filevol/internal/volid"
)

func TestImageVolumeID(t *testing.T) {
	id := volid.NewVolume(volid.KindImage, "3f9a0c2e", "pvc-1")
	dir := "/pool/volumes"
	cases := []struct {
		backing string
		want    string
		ok      bool
	}{
		{dir + "/" + id + ".img", id, true},
		{dir + "/.tmp-" + id + ".img", id, true},                  // being created or deleted
		{dir + "/.tmp-" + id + "@0123456789abcdef.img", id, true}, // the same, on a shared pool
		{dir + "/.tmp-" + id + "@.json.x", "", false},
		{dir + "//" + id + ".img", id, true},
		{dir + "/" + id + ".json", "", false},
		{dir + "/sub/" + id + ".img", "", false},
		{"/pool/snapshots/" + id + ".img", "", false},
		{dir + "/not-an-id.img", "", false},
		{dir + "/.img", "", false},
		{"/elsewhere/disk.img", "", false},
	}
	for _, c := range cases {
		got, ok := ImageVolumeID(dir, c.backing)
		if ok != c.ok || (ok && got != c.want) {
			t.Errorf("ImageVolumeID(%q) = %q, %v; want %q, %v", c.backing, got, ok, c.want, c.ok)
		}
	}
}
