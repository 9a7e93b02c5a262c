package pool

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

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
}

// loadIdentity reads the pool's identity, making it if the pool has none
// yet. Two processes opening a new pool at once agree: the identity is
// published with a no-replace rename, and the loser reads the winner's.
func loadIdentity(dir string) (identity, error) {
	path := filepath.Join(dir, identityFile)
	for range 2 {
		data, err := os.ReadFile(path)
		if err == nil {
			var id identity
			if err := json.Unmarshal(data, &id); err != nil {
				return identity{}, fmt.Errorf("pool identity %s: %w", path, err)
			}
			if err := volid.ValidPool(id.ID); err != nil || id.Version != recordVersion {
				return identity{}, fmt.Errorf("pool identity %s: version %d, ID %q: not one this filevol reads", path, id.Version, id.ID)
			}
			return id, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return identity{}, err
		}
		if err := makeIdentity(dir, path); err != nil && !errors.Is(err, unix.EEXIST) {
			return identity{}, err
		}
	}
	return identity{}, fmt.Errorf("pool identity %s: made, then not found", path)
}

func makeIdentity(dir, path string) error {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return err
	}
	data, err := json.Marshal(identity{Version: recordVersion, ID: hex.EncodeToString(b[:]), CreatedAt: time.Now().UTC()})
	if err != nil {
		return err
	}
	tmp := path + ".tmp-" + hex.EncodeToString(b[:])
	fd, err := durable.CreateExcl(tmp)
	if err != nil {
		return err
	}
	err = durable.WriteAll(fd, data)
	if err == nil {
		err = durable.Fsync(fd)
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err == nil {
		err = durable.RenameNoReplace(tmp, path)
	}
	_ = os.Remove(tmp)
	if err != nil {
		return err
	}
	return durable.SyncDir(dir)
}
