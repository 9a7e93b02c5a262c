package fake

import (
	"crypto/sha512"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/filevol/filevol/internal/hostos/fscrypt"
)

// Keys is a stateful fscrypt.Keys: a keyring per encryptable filesystem
// (Encryptable), policies per directory, and files held open (HoldOpen),
// with the kernel's rules the driver depends on:
//   - the same key always has the same identifier (here a hash of it);
//   - a filesystem not made encryptable refuses with ErrNotSupported;
//   - a policy needs its key in the keyring and an empty directory (the
//     test's real directory is read), and a directory under another key
//     refuses with ErrOtherPolicy; the same key again is no error;
//   - Remove of a key with files held open leaves it IncompletelyRemoved
//     until they are released and it is removed again.
type Keys struct {
	mu       sync.Mutex
	rings    map[string]map[fscrypt.KeyID]bool // mount point -> keys (true: incompletely removed)
	policies map[string]fscrypt.KeyID
	open     map[fscrypt.KeyID]int
}

var _ fscrypt.Keys = (*Keys)(nil)

// NewKeys returns a fake with no encryptable filesystem.
func NewKeys() *Keys {
	return &Keys{rings: map[string]map[fscrypt.KeyID]bool{}, policies: map[string]fscrypt.KeyID{}, open: map[fscrypt.KeyID]int{}}
}

// Encryptable makes the filesystem mounted at mountPoint one that can
// encrypt (ext4 with the encrypt feature).
func (k *Keys) Encryptable(mountPoint string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.rings[filepath.Clean(mountPoint)] = map[fscrypt.KeyID]bool{}
}

// HoldOpen opens a file under key id until release is called.
func (k *Keys) HoldOpen(id fscrypt.KeyID) (release func()) {
	k.mu.Lock()
	k.open[id]++
	k.mu.Unlock()
	return func() {
		k.mu.Lock()
		k.open[id]--
		k.mu.Unlock()
	}
}

// ring is the keyring of the filesystem path is on: the longest
// encryptable mount point that holds it. Call with mu held.
func (k *Keys) ring(path string) (map[fscrypt.KeyID]bool, error) {
	path = filepath.Clean(path)
	best := ""
	for m := range k.rings {
		if (path == m || strings.HasPrefix(path, m+"/")) && len(m) > len(best) {
			best = m
		}
	}
	if best == "" {
		return nil, fmt.Errorf("%s: %w", path, fscrypt.ErrNotSupported)
	}
	return k.rings[best], nil
}

// Add puts key in the keyring of mountPoint's filesystem.
func (k *Keys) Add(mountPoint string, key []byte) (fscrypt.KeyID, error) {
	if err := fscrypt.CheckKey(key); err != nil {
		return fscrypt.KeyID{}, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	r, err := k.ring(mountPoint)
	if err != nil {
		return fscrypt.KeyID{}, err
	}
	sum := sha512.Sum512(key)
	id := fscrypt.KeyID(sum[:16])
	r[id] = false
	return id, nil
}

// Remove takes the key out of the keyring.
func (k *Keys) Remove(mountPoint string, id fscrypt.KeyID) (fscrypt.Status, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	r, err := k.ring(mountPoint)
	if err != nil {
		return 0, err
	}
	if _, ok := r[id]; !ok {
		return fscrypt.Absent, nil
	}
	if k.open[id] > 0 {
		r[id] = true
		return fscrypt.IncompletelyRemoved, nil
	}
	delete(r, id)
	return fscrypt.Absent, nil
}

// Status is the key's status.
func (k *Keys) Status(mountPoint string, id fscrypt.KeyID) (fscrypt.Status, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	r, err := k.ring(mountPoint)
	if err != nil {
		return 0, err
	}
	half, ok := r[id]
	switch {
	case !ok:
		return fscrypt.Absent, nil
	case half:
		return fscrypt.IncompletelyRemoved, nil
	}
	return fscrypt.Present, nil
}

// SetPolicy encrypts dir under id.
func (k *Keys) SetPolicy(dir string, id fscrypt.KeyID) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	dir = filepath.Clean(dir)
	r, err := k.ring(dir)
	if err != nil {
		return err
	}
	if have, ok := k.policies[dir]; ok {
		if have != id {
			return fmt.Errorf("fscrypt: encrypt %s: %w", dir, fscrypt.ErrOtherPolicy)
		}
		return nil
	}
	if half, ok := r[id]; !ok || half {
		return fmt.Errorf("fscrypt: encrypt %s: key %s is not in the filesystem's keyring", dir, id)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	if len(entries) > 0 {
		return fmt.Errorf("fscrypt: encrypt %s: %w", dir, fscrypt.ErrNotEmpty)
	}
	k.policies[dir] = id
	return nil
}

// Policy is the key dir is encrypted under.
func (k *Keys) Policy(dir string) (fscrypt.KeyID, bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	id, ok := k.policies[filepath.Clean(dir)]
	return id, ok, nil
}
