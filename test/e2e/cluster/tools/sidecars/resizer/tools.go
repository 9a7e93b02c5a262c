//go:build tools

package tools

import (
	_ "github.com/kubernetes-csi/external-resizer/v2/cmd/csi-resizer"
)
