// Package ext4 runs csi-sanity with mount volumes on ext4, the default.
package ext4

import (
	"testing"

	"github.com/filevol/filevol/test/sanity/harness"
)

func TestSanityExt4(t *testing.T) { harness.Run(t, "ext4", nil) }
