package durable

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// staleRetries bounds ReadReplaced: each retry looks the name up afresh,
// so only a file replaced again in between needs another.
const staleRetries = 4

// ReadReplaced reads a file that writers replace by renaming a new one
// over it (Publish with replace). On a network filesystem a client that
// looked the name up before the rename holds a handle of the replaced
// file, and the server answers ESTALE (GlusterFS did: a controller reading
// an attachment record, and the freeze ack, that another client had just
// renamed over); reading again looks the name up afresh.
func ReadReplaced(path string) ([]byte, error) {
	for try := 0; ; try++ {
		data, err := os.ReadFile(path)
		if !errors.Is(err, unix.ESTALE) || try == staleRetries {
			return data, err
		}
	}
}
