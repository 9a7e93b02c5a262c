package pool

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"time"

	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/durable"
	"github.com/filevol/filevol/internal/volid"
)

// identityFile is <dir>/pool.json: the pool's ID, made at its first open
// and never changed. Every volume and snapshot ID the pool makes carries
// it (internal/volid), so any process tells from an ID alone which pool
// holds the volume.
const identityFile = "pool.json"

type identity struct {
	Version   int       `json:"version"`
	ID        string    `json:"id"`
	CreatedAt time.Time `json:"createdAt"`
	// Shared: the pool was opened as one that several hosts share
	// (Options.Shared), at its first open or since. From then on it is
	// refused to a node-local open: that one would repair the whole pool
	// whenever its host's flock says it is alone, and delete the other
	// hosts' writes in flight. Set once, never cleared by filevol.
	Shared bool `json:"shared,omitempty"`
}

// openIdentity is loadIdentity for an open that says whether the pool is
// shared: a shared open marks the pool shared, a node-local open of a
// shared pool is refused.
func openIdentity(dir string, shared bool) (identity, error) {
	id, err := loadIdentity(dir, shared)
	switch {
	case err != nil:
		return identity{}, err
	case id.Shared && !shared:
		return identity{}, fmt.Errorf(`pool %s is shared by several hosts ("shared":true in %s): open it as shared (--pool-shared); `+
			"if no other host uses it any more, remove that field by hand first", dir, identityFile)
	case shared && !id.Shared:
		id.Shared = true
		if err := writeIdentity(dir, id); err != nil {
			return identity{}, fmt.Errorf("mark pool %s shared: %w", dir, err)
		}
		klog.InfoS("Pool marked shared: from now on every process opens it as shared", "dir", dir)
	}
	return id, nil
}

// loadIdentity reads the pool's identity, making it if the pool has none
// yet (shared as told). Two processes opening a new pool at once agree:
// the identity is published with a no-replace rename, and the loser reads
// the winner's.
func loadIdentity(dir string, shared bool) (identity, error) {
	path := filepath.Join(dir, identityFile)
	data, err := durable.ReadOrPublish(path, func() ([]byte, error) {
		var b [4]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, err
		}
		return json.Marshal(identity{Version: recordVersion, ID: hex.EncodeToString(b[:]), CreatedAt: time.Now().UTC(), Shared: shared})
	})
	if err != nil {
		return identity{}, err
	}
	var id identity
	if err := json.Unmarshal(data, &id); err != nil {
		return identity{}, fmt.Errorf("pool identity %s: %w", path, err)
	}
	if err := volid.ValidPool(id.ID); err != nil || id.Version != recordVersion {
		return identity{}, fmt.Errorf("pool identity %s: version %d, ID %q: not one this filevol reads", path, id.Version, id.ID)
	}
	return id, nil
}

// writeIdentity publishes id over the pool's identity, durably.
func writeIdentity(dir string, id identity) error {
	path := filepath.Join(dir, identityFile)
	data, err := json.Marshal(id)
	if err != nil {
		return err
	}
	return durable.Publish(durable.TmpName(path), path, data, true)
}
