package ceph

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"time"
)

// entity is one cephx identity and its capabilities.
type entity struct {
	name string
	caps [][2]string
}

// entities are the cluster's identities, imported into the monitor's
// database at its mkfs (no CLI call per key); the clients' are added by
// bootstrap, one per node.
var entities = []entity{
	{"mon.", [][2]string{{"mon", "allow *"}}},
	{"client.admin", [][2]string{{"mon", "allow *"}, {"osd", "allow *"}, {"mds", "allow *"}, {"mgr", "allow *"}}},
	{"mgr." + mgrID, [][2]string{{"mon", "allow profile mgr"}, {"osd", "allow *"}, {"mds", "allow *"}}},
	{"osd.0", [][2]string{{"mon", "allow profile osd"}, {"mgr", "allow profile osd"}, {"osd", "allow *"}}},
	{"mds." + mdsID, [][2]string{{"mon", "allow profile mds"}, {"osd", "allow rwx"}, {"mds", "allow"}, {"mgr", "allow profile mds"}}},
}

// clientCaps are a node's: the filesystem read and written, with quotas
// and layouts (p) and snapshots (s).
var clientCaps = [][2]string{{"mon", "allow r"}, {"mds", "allow rwps"}, {"osd", "allow rw tag cephfs data=" + FSName}}

// newKey is a cephx secret as Ceph encodes it: type 1 (AES), the creation
// time, the length and 16 random bytes, in base64.
func newKey() string {
	b := make([]byte, 12, 28)
	binary.LittleEndian.PutUint16(b[0:], 1)
	now := time.Now()
	binary.LittleEndian.PutUint32(b[2:], uint32(now.Unix()))
	binary.LittleEndian.PutUint32(b[6:], uint32(now.Nanosecond()))
	binary.LittleEndian.PutUint16(b[10:], 16)
	secret := make([]byte, 16)
	_, _ = rand.Read(secret)
	return base64.StdEncoding.EncodeToString(append(b, secret...))
}

// keyring is the keyring file's text for es with their keys.
func keyring(es []entity, keys map[string]string) []byte {
	var b bytes.Buffer
	for _, e := range es {
		fmt.Fprintf(&b, "[%s]\n\tkey = %s\n", e.name, keys[e.name])
		for _, c := range e.caps {
			fmt.Fprintf(&b, "\tcaps %s = %q\n", c[0], c[1])
		}
	}
	return b.Bytes()
}

func newUUID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}
