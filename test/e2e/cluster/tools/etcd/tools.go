//go:build tools

// Package tools pins etcd. go install go.etcd.io/etcd/server/v3@v3.6.5 is refused
// (its go.mod has replace directives), so it is built from this module instead.
package tools

import _ "go.etcd.io/etcd/server/v3"
