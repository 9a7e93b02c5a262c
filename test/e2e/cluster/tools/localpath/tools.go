//go:build tools

// Package tools pins rancher/local-path-provisioner, the local storage the e2e
// time-to-running measurement compares filevol with; build.sh builds it from here.
package tools

import (
	_ "github.com/rancher/local-path-provisioner"
)
