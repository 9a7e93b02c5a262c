//go:build tools

// Package velero pins what velero.sh builds: velero's one binary (server,
// node-agent and data mover) and the AWS object store plugin, with velero's
// own replace of kopia, which `go install pkg@version` refuses.
package velero

import (
	_ "github.com/vmware-tanzu/velero-plugin-for-aws/velero-plugin-for-aws"
	_ "github.com/vmware-tanzu/velero/cmd/velero"
)
