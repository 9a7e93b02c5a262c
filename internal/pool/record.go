package pool

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// recordVersion is the Version this package writes; it refuses to read
// other versions rather than misread them after a downgrade.
const recordVersion = 1

// File names inside <dir>/volumes. Only validated IDs are put into them.
const (
	tmpPrefix = ".tmp-"
	imgSuffix = ".img"
	recSuffix = ".json"
)

func (p *Pool) imagePath(id string) string    { return p.vdir + "/" + id + imgSuffix }
func (p *Pool) tmpImagePath(id string) string { return p.vdir + "/" + tmpPrefix + id + imgSuffix }
func (p *Pool) recordPath(id string) string   { return p.vdir + "/" + id + recSuffix }

// writeTmpRecord writes data to a new temporary file beside the record and
// fsyncs it, so that the rename which publishes it publishes complete
// contents: without the fsync a crash could leave a committed, empty record.
// The random suffix keeps two processes sharing a pool from colliding. The
// caller renames the file into place and fsyncs the directory.
func (p *Pool) writeTmpRecord(id string, data []byte) (string, error) {
	return writeTmpFile(p.vdir, id, data)
}

// writeTmpFile is writeTmpRecord for any pool directory (volumes/,
// snapshots/): the same discipline for every record.
func writeTmpFile(dir, id string, data []byte) (string, error) {
	name := dir + "/" + tmpPrefix + id + recSuffix + "." + strconv.FormatUint(rand.Uint64(), 36)
	fd, err := createExcl(name)
	if err != nil {
		return "", wrapNoSpace(err)
	}
	err = writeAll(fd, data)
	if err == nil {
		err = fsync(fd)
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err != nil {
		_ = unix.Unlink(name)
		return "", wrapNoSpace(&os.PathError{Op: "write record", Path: name, Err: err})
	}
	return name, nil
}

// writeTmpFileSyncing is writeTmpFile while another goroutine fsyncs the
// image open at imageFD (named imagePath in errors), for a snapshot whose
// record depends on how its image was made: as in create, both must be
// durable before the commit point, and side by side the two fsyncs overlap
// instead of adding up. It returns once both have ended; on an error the
// temporary record is gone, and the image is the caller's to remove.
func writeTmpFileSyncing(dir, id string, data []byte, imageFD int, imagePath string) (string, error) {
	imageSynced := make(chan error, 1)
	go func() { imageSynced <- fsync(imageFD) }()
	tmp, err := writeTmpFile(dir, id, data)
	serr := <-imageSynced
	if err != nil {
		return "", err
	}
	if serr != nil {
		_ = unix.Unlink(tmp)
		return "", wrapNoSpace(&os.PathError{Op: "sync", Path: imagePath, Err: serr})
	}
	return tmp, nil
}

// encodeRecord is the on-disk form of v: compact JSON (no indentation; a
// record is read by programs, and ~300 bytes keeps 1,000 of them cheap).
func encodeRecord(v *Volume) ([]byte, error) { return json.Marshal(v) }

// readRecord reads and checks the record of id: ErrNotFound when absent.
func (p *Pool) readRecord(id string) (Volume, error) {
	path := p.recordPath(id)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Volume{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return Volume{}, err
	}
	return decodeRecord(path, id, data)
}

// decodeRecord parses the record of id read from path (named in errors).
// What it accepts is the current version and holds id.
func decodeRecord(path, id string, data []byte) (Volume, error) {
	var v Volume
	if err := json.Unmarshal(data, &v); err != nil {
		return Volume{}, fmt.Errorf("record %s: %w", path, err)
	}
	if err := checkHeader(path, "volume", id, v.Version, v.ID); err != nil {
		return Volume{}, err
	}
	return v, nil
}

// checkHeader checks what every record must carry: the version this filevol
// reads, and the ID the record's file name promises.
func checkHeader(path, kind, id string, version int, gotID string) error {
	if version != recordVersion {
		return fmt.Errorf("record %s: version %d, this filevol reads version %d", path, version, recordVersion)
	}
	if gotID != id {
		return fmt.Errorf("record %s holds %s ID %q", path, kind, gotID)
	}
	return nil
}
