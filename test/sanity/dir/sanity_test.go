// Package dir runs csi-sanity on directory volumes (provisioningMode:
// directory): btrfs subvolumes with a qgroup quota in a directory pool.
package dir

import (
	"testing"

	"github.com/filevol/filevol/test/sanity/harness"
)

func TestSanityDir(t *testing.T) { harness.RunDir(t, "dir", nil) }
