package loop

import "testing"

// Names matches by the path string only: the path itself, or the suffix a
// file opened through an unreachable mount shows (a dead client's mount,
// unmounted lazily: "/pool/volumes/x.img"), never a mere base name or a
// partial component.
func TestNames(t *testing.T) {
	const img = "/mnt/node-a/pool/volumes/fv1-x.img"
	for _, tc := range []struct {
		backing string
		want    bool
	}{
		{img, true},
		{"/mnt/node-a/pool/./volumes/fv1-x.img", false}, // sysfs shows clean paths
		{"/pool/volumes/fv1-x.img", true},
		{"/volumes/fv1-x.img", true},
		{"/fv1-x.img", true},
		{"fv1-x.img", false},              // not a path the kernel shows
		{"/ool/volumes/fv1-x.img", false}, // not at a component boundary
		{"/mnt/node-b/pool/volumes/fv1-x.img", false},
		{"/pool/volumes/fv1-y.img", false},
	} {
		if got := Names(Device{BackingFile: tc.backing}, img); got != tc.want {
			t.Errorf("Names(%q, %q) = %v, want %v", tc.backing, img, got, tc.want)
		}
	}
}
