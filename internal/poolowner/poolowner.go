// Package poolowner is the registry of who uses a pool that several hosts
// share: each owner (a node, or a controller) that opens the pool has a
// directory of its own under <dir>/owners/, named by its key, holding its
// name. Both kinds of pool keep it (internal/pool, internal/dirpool), in
// the same layout, so that ControllerPublishVolume can ask either whether
// a node reaches the pool (Known) without one kind importing the other.
//
//	<dir>/owners/<key>/owner    the owner's name, for people reading the pool
//	<dir>/owners/<key>/client   a node's client of the pool's filesystem (client.go)
//
// What else an owner keeps in its directory is its pool's (the image
// pool's owner lock, a node's freeze marks).
package poolowner

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"

	"github.com/filevol/filevol/internal/durable"
	"github.com/filevol/filevol/internal/recordstore"
)

const (
	ownersDir = "owners"
	nameFile  = "owner"
)

// Key is the key that names an owner's files in a shared pool: 16 hex
// digits of sha256(owner), as internal/inuse names a node's records (the
// same node has the same key in both). A name may be 253 bytes long and
// hold any byte; the key fits any file name.
func Key(owner string) string {
	sum := sha256.Sum256([]byte(owner))
	return hex.EncodeToString(sum[:8])
}

// Dir is the directory of owner key's own state in the pool at dir.
func Dir(dir, key string) string { return filepath.Join(dir, ownersDir, key) }

// Announce records, in the shared directory dir, that owner uses it: it
// makes the owner's directory (Dir) and writes the owner's name there.
// Known then finds it.
func Announce(dir, owner string) error {
	odir := Dir(dir, Key(owner))
	if err := durable.EnsureDir(filepath.Dir(odir)); err != nil {
		return err
	}
	if err := durable.EnsureDir(odir); err != nil {
		return err
	}
	return writeName(odir, owner)
}

// Known reports whether owner (a node ID) has opened the shared pool at
// dir: its name is under owners/. ControllerPublishVolume asks it, to
// answer NOT_FOUND for a node that cannot reach the pool (CSI: "node does
// not exist").
func Known(dir, owner string) bool {
	cur, err := os.ReadFile(filepath.Join(Dir(dir, Key(owner)), nameFile))
	return err == nil && bytes.Equal(cur, []byte(owner+"\n"))
}

// writeName records whose key the directory odir is, once: an operator
// reading .tmp-<id>@<key>.img in the pool can tell whose it is.
func writeName(odir, name string) error {
	return writeOnce(odir, nameFile, []byte(name+"\n"))
}

// writeOnce makes odir/file hold data, unless it already does: a
// temporary file renamed over it, so a reader sees the old content or the
// new, whole. Two processes of the owner may write it at once: each its
// own temporary file.
func writeOnce(odir, file string, data []byte) error {
	path := filepath.Join(odir, file)
	if cur, err := os.ReadFile(path); err == nil && bytes.Equal(cur, data) {
		return nil
	}
	f, err := os.CreateTemp(odir, recordstore.TmpPrefix+file+"-*")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
	}
	return err
}
