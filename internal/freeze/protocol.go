package freeze

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/filevol/filevol/internal/durable"
)

// DirName is the directory of requests and answers inside the pool.
const DirName = "freeze"

const (
	reqSuffix = ".req"
	ackSuffix = ".ack"
	tmpPrefix = ".tmp-"
	version   = 1
)

// Errors a Requester returns; internal/csi maps them to gRPC codes.
var (
	// ErrBusy: another freeze of the volume is in progress.
	ErrBusy = errors.New("another snapshot or clone of the volume holds its filesystem frozen")
	// ErrNodeUnavailable: the node did not answer in time.
	ErrNodeUnavailable = errors.New("the node did not answer the freeze request")
	// ErrNoSpace: the filesystem could not flush its journal: the pool is full.
	ErrNoSpace = errors.New("the filesystem cannot be frozen: its pool is out of space")
	// ErrFailed: the node tried and failed; the message says why.
	ErrFailed = errors.New("freeze failed on the node")
)

// request is <volume ID>.req.
type request struct {
	Version  int       `json:"version"`
	VolumeID string    `json:"volumeID"`
	Node     string    `json:"node"`
	Token    string    `json:"token"`
	Deadline time.Time `json:"deadline"`
	// Owner is the owner file of the requesting process (owner.go): its
	// lock is free once that process is gone.
	Owner string `json:"owner"`
}

// stale reports whether nobody waits on req any more: its lease ran out,
// or the process that made it is gone.
func stale(dir string, req request) bool {
	return time.Now().After(req.Deadline) || !ownerAlive(dir, req.Owner)
}

// answer is <volume ID>.ack.
type answer struct {
	Token string `json:"token"`
	// Node is the node that answered.
	Node string `json:"node"`
	// State is what the node did.
	State string `json:"state"`
	// Error says why, for stateFailed and stateNoSpace, and for a thaw
	// that failed (stateThawFailed).
	Error      string `json:"error,omitempty"`
	MountPoint string `json:"mountPoint,omitempty"`
}

const (
	stateFrozen     = "frozen"
	stateNotMounted = "not-mounted" // nothing to freeze on that node: clone as it is
	stateFailed     = "failed"
	stateNoSpace    = "no-space"
	stateThawFailed = "thaw-failed" // the filesystem may still be frozen
)

func reqPath(dir, id string) string { return filepath.Join(dir, id+reqSuffix) }
func ackPath(dir, id string) string { return filepath.Join(dir, id+ackSuffix) }

func newToken() string { return strconv.FormatUint(rand.Uint64(), 36) }

// tmpName names a temporary file after the owner lock of the process
// writing it (owner.go), so that what a killed process left can be told
// from another's write in flight (removeOldTemp). PIDs cannot: a driver in
// a container, or in a PID namespace of its own, is PID 1 every time.
func tmpName(owner string) string {
	return tmpPrefix + strings.TrimPrefix(owner, ownerPrefix) + "." + newToken()
}

// readJSON reads path into v; ok is false when it does not exist (or is
// being replaced: a torn read is impossible, files are renamed into place).
func readJSON(path string, v any) (bool, error) {
	data, err := durable.ReadReplaced(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return false, fmt.Errorf("%s: %w", path, err)
	}
	return true, nil
}

// writeJSON writes v to a temporary file in dir and renames it to path
// (replace) or links it there (no replace: publish fails with
// fs.ErrExist when path exists).
func writeJSON(dir, owner, path string, v any, replace bool) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, tmpName(owner))
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		_ = os.Remove(tmp)
		if errors.Is(err, syscall.ENOSPC) {
			// A full pool: its filesystems cannot be frozen either (the
			// journal cannot be flushed), and the request cannot be made.
			return fmt.Errorf("%w: %v", ErrNoSpace, err)
		}
		return err
	}
	if replace {
		err = os.Rename(tmp, path)
	} else {
		err = os.Link(tmp, path)
	}
	_ = os.Remove(tmp)
	return err
}

// volumeOf returns the volume ID of a request or answer file name.
func volumeOf(name, suffix string) (string, bool) {
	if strings.HasPrefix(name, tmpPrefix) || strings.HasPrefix(name, ownerPrefix) {
		return "", false
	}
	return strings.CutSuffix(name, suffix)
}
