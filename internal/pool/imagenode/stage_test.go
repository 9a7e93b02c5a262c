package imagenode

import (
	"slices"
	"testing"
)

// TestMountOptions: a staging mount has the caller's flags, the ones
// every volume gets, xfs's nouuid (clones share a UUID) and ro when asked.
func TestMountOptions(t *testing.T) {
	opts := mountOptions("xfs", []string{"noatime"}, true)
	for _, want := range []string{"noatime", "nosuid", "nodev", "nouuid", "ro"} {
		if !slices.Contains(opts, want) {
			t.Errorf("mountOptions lacks %q: %v", want, opts)
		}
	}
}
