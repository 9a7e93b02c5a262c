package poolowner

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/filevol/filevol/internal/durable"
	"github.com/filevol/filevol/internal/inuse"
)

// clientFile holds, in a node's directory, the node's client of the pool's
// filesystem where that filesystem names its clients (CephFS).
const clientFile = "client"

// A controller fencing a node that went silent (power lost, link cut) must
// learn the node's client without reading a file the node wrote: on
// CephFS the node's client holds exclusive capabilities on what it wrote,
// and a read of it waits until the MDS gives up on a client that does not
// answer (its session_timeout, 60 s by default). So the node notes its
// client here when it opens the pool and whenever it mounts it again
// (NoteClient), and the controller reads it at ControllerPublishVolume,
// while the node is alive (it just registered or staged), into the
// attachment record, a file of the controller's own (internal/attach).

// NoteClient records c as node's client of the shared pool at dir, in the
// node's directory (made by Announce), unless it is already recorded.
func NoteClient(dir, node string, c inuse.Client) error {
	data, err := json.Marshal(c)
	if err != nil {
		return err
	}
	if err := writeOnce(Dir(dir, Key(node)), clientFile, append(data, '\n')); err != nil {
		return fmt.Errorf("note node %s's client of the pool: %w", node, err)
	}
	return nil
}

// ClientOf reads what node noted of its client (NoteClient); false when it
// noted none (an earlier version, or a filesystem without named clients).
func ClientOf(dir, node string) (inuse.Client, bool, error) {
	path := filepath.Join(Dir(dir, Key(node)), clientFile)
	data, err := durable.ReadReplaced(path)
	if errors.Is(err, fs.ErrNotExist) {
		return inuse.Client{}, false, nil
	}
	if err != nil {
		return inuse.Client{}, false, fmt.Errorf("read node %s's client of the pool: %w", node, err)
	}
	var c inuse.Client
	if err := json.Unmarshal(data, &c); err != nil || c.Kind == "" || c.ID == 0 {
		return inuse.Client{}, false, fmt.Errorf("node %s's client of the pool, %s: unreadable (%v): the node writes it again when it starts", node, path, err)
	}
	return c, true, nil
}
