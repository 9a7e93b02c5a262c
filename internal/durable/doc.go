// Package durable holds the file primitives whose order makes filevol's
// on-disk state crash safe: exclusive creates, complete writes, fsync
// (through aiofsync), renames that never replace, durable directories, and
// the group commit of a directory fsync (DirSync). The record store and the
// pool's image files are built on them, so the one place that knows how a
// change becomes durable is here.
//
// It knows nothing of records, volumes, gRPC or CSI, and imports nothing
// of filevol but internal/aiofsync.
package durable
