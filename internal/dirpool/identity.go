package dirpool

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

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
	data, err := durable.ReadOrPublish(path, func() ([]byte, error) {
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		return json.Marshal(identity{Version: recordVersion, ID: hex.EncodeToString(b), CreatedAt: time.Now().UTC()})
	})
	if err != nil {
		return "", err
	}
	var id identity
	if err := json.Unmarshal(data, &id); err != nil {
		return "", fmt.Errorf("directory pool identity %s: %w", path, err)
	}
	if err := volid.ValidPool(id.ID); err != nil || id.Version != recordVersion {
		return "", fmt.Errorf("directory pool identity %s: version %d, ID %q: not one this filevol reads", path, id.Version, id.ID)
	}
	return id.ID, nil
}
