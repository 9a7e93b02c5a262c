// Package xfs runs csi-sanity with mount volumes on XFS, chosen through
// the StorageClass fstype parameter.
package xfs

import (
	"testing"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"

	"github.com/filevol/filevol/internal/csi"
	"github.com/filevol/filevol/test/sanity/harness"
)

func TestSanityXFS(t *testing.T) {
	harness.Run(t, "xfs", func(c *sanity.TestConfig) {
		c.TestVolumeParameters = map[string]string{csi.ParamFSType: "xfs"}
	})
}
