// Package block runs csi-sanity with raw block volumes.
package block

import (
	"testing"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"

	"github.com/filevol/filevol/test/sanity/harness"
)

func TestSanityBlock(t *testing.T) {
	harness.Run(t, "block", func(c *sanity.TestConfig) { c.TestVolumeAccessType = "block" })
}
