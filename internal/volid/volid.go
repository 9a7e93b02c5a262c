// Package volid owns the shape of filevol's volume and snapshot IDs: how
// one is made from a CO's name, and how any process — a controller on
// another host, a node, kubectl-filevol — reads from an ID alone which
// pool holds the volume and what kind of volume it is, without a lookup
// (as csi-driver-nfs's server#share#subdir IDs do).
//
// Version 1 (made by this filevol):
//
//	fv1-<kind>-<pool>-<hash>   a volume:   fv1-img-3f9a0c2e-<32 hex>
//	fs1-<pool>-<hash>          a snapshot: fs1-3f9a0c2e-<32 hex>
//	fg1-<pool>-<hash>          a group snapshot: fg1-3f9a0c2e-<32 hex>
//
// <kind> is the kind of volume (KindImage; any kind is 1 to 8 lowercase
// letters, so a process reads the IDs of kinds newer than itself and
// answers that it holds no such volume); <pool> is the ID of the pool
// that holds it (8 lowercase hex digits, made when the pool is first
// opened); <hash> is 32 hex digits of sha256(name), so a retried create
// finds its volume by name without an index, and no name becomes a path.
//
// Version 0 (every filevol before version 1; still read, never made):
//
//	fv-<hash>   a volume: an image in the pool of the node that made it
//	fs-<hash>   a snapshot in that pool
//
// Every accepted ID is made of [a-z0-9-] only, so it is safe as a file
// name: "..", "/" and NUL can never pass. The package imports nothing of
// filevol's.
package volid

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrInvalid: a string that no filevol made as an ID. An ID of the right
// shape that names no volume is not invalid; it is not found.
var ErrInvalid = errors.New("not a filevol ID")

// Kind is the kind of volume an ID names.
type Kind string

// KindImage is a volume held in an image file: block, or a filesystem on it.
const KindImage Kind = "img"

// KindDir is a directory volume: a btrfs subvolume with a qgroup limit in a
// directory pool (internal/dirpool).
const KindDir Kind = "dir"

// kinds are the kinds this filevol knows; ParseVolume refuses an ID of
// another kind, ParseVolumeAnyKind reads it.
var kinds = []Kind{KindImage, KindDir}

const (
	hashLen    = 32 // hex digits: 128 bits of sha256
	poolIDLen  = 8  // hex digits
	maxKindLen = 8  // lowercase letters
	volumeV0   = "fv-"
	volumeV1   = "fv1-"
	snapV0     = "fs-"
	snapV1     = "fs1-"
	groupV1    = "fg1-"
)

// Volume is what a volume ID says.
type Volume struct {
	// Version is 0 for a legacy "fv-" ID, 1 for "fv1-".
	Version int
	// Kind is the kind of volume (KindImage for every version 0 ID).
	Kind Kind
	// Pool is the ID of the pool that holds the volume; "" for version 0:
	// the node-local pool of the node that made it.
	Pool string
	// Hash is the hash of the volume's name.
	Hash string
}

// Snapshot is what a snapshot ID says.
type Snapshot struct {
	Version int
	Pool    string // "" for version 0
	Hash    string
}

// hash is the name's part of every ID.
func hash(name string) string {
	sum := sha256.Sum256([]byte(name))
	return hex.EncodeToString(sum[:hashLen/2])
}

// NewVolume returns the version 1 ID of the volume called name, of kind,
// in the pool whose ID is pool (a valid pool ID: see ValidPool).
func NewVolume(kind Kind, pool, name string) string {
	return volumeV1 + string(kind) + "-" + pool + "-" + hash(name)
}

// LegacyVolume returns the version 0 ID a volume called name had: the
// ID to look for before making a new one, so a create retried across an
// upgrade finds the volume made before it.
func LegacyVolume(name string) string { return volumeV0 + hash(name) }

// NewSnapshot returns the version 1 ID of the snapshot called name in pool.
func NewSnapshot(pool, name string) string { return snapV1 + pool + "-" + hash(name) }

// NewGroupSnapshot returns the ID of the group snapshot called name in
// pool (CSI VolumeGroupSnapshot.group_snapshot_id). Groups came after
// version 1: there is no version 0 of them.
func NewGroupSnapshot(pool, name string) string { return groupV1 + pool + "-" + hash(name) }

// ParseGroupSnapshot reads a group snapshot ID; what it says is the pool
// that holds the group and its members.
func ParseGroupSnapshot(id string) (Snapshot, error) {
	rest, ok := strings.CutPrefix(id, groupV1)
	if !ok {
		return Snapshot{}, invalid("group snapshot", id, fmt.Sprintf("does not start with %q", groupV1))
	}
	return parsePoolHash("group snapshot", id, rest, "fg1-<pool>-<hash>")
}

// LegacySnapshot returns the version 0 ID a snapshot called name had.
func LegacySnapshot(name string) string { return snapV0 + hash(name) }

// ParseVolume reads a volume ID of either version and of a kind this
// filevol knows: what a pool checks before an ID becomes one of its
// paths. The error wraps ErrInvalid and says what is wrong.
func ParseVolume(id string) (Volume, error) {
	v, err := ParseVolumeAnyKind(id)
	if err != nil {
		return Volume{}, err
	}
	if !slices.Contains(kinds, v.Kind) {
		return Volume{}, invalid("volume", id, fmt.Sprintf("has kind %s, which this filevol does not know (it knows %v)", quote(string(v.Kind)), kinds))
	}
	return v, nil
}

// ParseVolumeAnyKind reads a volume ID of either version whatever its
// kind: what a router needs (internal/csi sends a request to the backend
// of the ID's pool and kind). A well-formed ID of a kind that nothing
// here serves names no volume here; a malformed one names none anywhere.
func ParseVolumeAnyKind(id string) (Volume, error) {
	if rest, ok := strings.CutPrefix(id, volumeV0); ok {
		if err := checkHex("volume", id, rest, hashLen); err != nil {
			return Volume{}, err
		}
		return Volume{Version: 0, Kind: KindImage, Hash: rest}, nil
	}
	rest, ok := strings.CutPrefix(id, volumeV1)
	if !ok {
		return Volume{}, invalid("volume", id, fmt.Sprintf("does not start with %q (or %q)", volumeV1, volumeV0))
	}
	parts := strings.Split(rest, "-")
	if len(parts) != 3 {
		return Volume{}, invalid("volume", id, "is not fv1-<kind>-<pool>-<hash>")
	}
	v := Volume{Version: 1, Kind: Kind(parts[0]), Pool: parts[1], Hash: parts[2]}
	if err := checkKind(id, v.Kind); err != nil {
		return Volume{}, err
	}
	if err := checkHex("volume", id, v.Pool, poolIDLen); err != nil {
		return Volume{}, err
	}
	if err := checkHex("volume", id, v.Hash, hashLen); err != nil {
		return Volume{}, err
	}
	return v, nil
}

// checkKind checks the shape of a kind: 1 to maxKindLen lowercase letters.
func checkKind(id string, k Kind) error {
	if len(k) == 0 || len(k) > maxKindLen {
		return invalid("volume", id, fmt.Sprintf("has kind %s, not 1 to %d lowercase letters", quote(string(k)), maxKindLen))
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; c < 'a' || c > 'z' {
			return invalid("volume", id, fmt.Sprintf("has %q in its kind, where a lowercase letter belongs", c))
		}
	}
	return nil
}

// ParseSnapshot reads a snapshot ID of either version.
func ParseSnapshot(id string) (Snapshot, error) {
	if rest, ok := strings.CutPrefix(id, snapV0); ok {
		if err := checkHex("snapshot", id, rest, hashLen); err != nil {
			return Snapshot{}, err
		}
		return Snapshot{Version: 0, Hash: rest}, nil
	}
	rest, ok := strings.CutPrefix(id, snapV1)
	if !ok {
		return Snapshot{}, invalid("snapshot", id, fmt.Sprintf("does not start with %q (or %q)", snapV1, snapV0))
	}
	return parsePoolHash("snapshot", id, rest, "fs1-<pool>-<hash>")
}

// parsePoolHash reads the <pool>-<hash> that ends a version 1 snapshot
// or group snapshot ID.
func parsePoolHash(what, id, rest, shape string) (Snapshot, error) {
	pool, h, ok := strings.Cut(rest, "-")
	if !ok {
		return Snapshot{}, invalid(what, id, "is not "+shape)
	}
	if err := checkHex(what, id, pool, poolIDLen); err != nil {
		return Snapshot{}, err
	}
	if err := checkHex(what, id, h, hashLen); err != nil {
		return Snapshot{}, err
	}
	return Snapshot{Version: 1, Pool: pool, Hash: h}, nil
}

// ValidPool reports whether s can be a pool's ID in a volume ID.
func ValidPool(s string) error { return checkHex("pool", s, s, poolIDLen) }

// checkHex checks that part of id is n lowercase hex digits.
func checkHex(what, id, part string, n int) error {
	if len(part) != n {
		return invalid(what, id, fmt.Sprintf("has %s where %d hex digits belong", quote(part), n))
	}
	for i := 0; i < len(part); i++ {
		if c := part[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return invalid(what, id, fmt.Sprintf("has %q where a lowercase hex digit belongs", c))
		}
	}
	return nil
}

func invalid(what, id, why string) error {
	if id == "" {
		return fmt.Errorf("%w: empty %s ID", ErrInvalid, what)
	}
	return fmt.Errorf("%w: %s ID %s %s", ErrInvalid, what, quote(id), why)
}

// quote quotes s for an error message, cut short when a client sends
// something huge.
func quote(s string) string {
	const max = 80
	if len(s) > max {
		return fmt.Sprintf("%q...", s[:max])
	}
	return fmt.Sprintf("%q", s)
}
