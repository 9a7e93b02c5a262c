package dirpool

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/durable"
	"github.com/filevol/filevol/internal/volid"
)

type identity struct {
	Version   int       `json:"version"`
	ID        string    `json:"id"`
	CreatedAt time.Time `json:"createdAt"`
}

// loadIdentity reads the pool's ID, making it at the first open (published
// with a no-replace rename: two first opens agree).
func loadIdentity(path string) (string, error) {
	for range 2 {
		data, err := os.ReadFile(path)
		if err == nil {
			var id identity
			if err := json.Unmarshal(data, &id); err != nil {
				return "", fmt.Errorf("directory pool identity %s: %w", path, err)
			}
			if err := volid.ValidPool(id.ID); err != nil || id.Version != recordVersion {
				return "", fmt.Errorf("directory pool identity %s: version %d, ID %q: not one this filevol reads", path, id.Version, id.ID)
			}
			return id.ID, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		data, _ = json.Marshal(identity{Version: recordVersion, ID: hex.EncodeToString(b), CreatedAt: time.Now().UTC()})
		err = durable.Publish(fmt.Sprintf("%s.tmp-%x", path, b), path, data, false)
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return "", err
		}
	}
	return "", fmt.Errorf("directory pool identity %s: could not be made", path)
}
