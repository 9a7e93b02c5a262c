package durable

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Publish makes data the content of path, durably and all at once: it is
// written to tmp (a name in path's directory that only this writer uses),
// fsynced, renamed to path — over the file there with replace, else only
// where there is none (EEXIST) — and the directory fsynced. A reader sees
// the old file or the new one, never part of one; tmp is gone afterwards
// unless the process dies first (then it is a stale temporary file that
// CreateExcl removes at the next write of that name).
func Publish(tmp, path string, data []byte, replace bool) error {
	fd, err := CreateExcl(tmp)
	if err != nil {
		return err
	}
	err = WriteAll(fd, data)
	if err == nil {
		err = Fsync(fd)
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err == nil {
		if replace {
			err = unix.Rename(tmp, path)
		} else {
			err = RenameNoReplace(tmp, path)
		}
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return SyncDir(filepath.Dir(path))
}

// ReadOrPublish reads the file at path, making it first where there is
// none: fresh's bytes are published there without replacing (Publish), so
// that of two processes making it at once both read the one that won.
func ReadOrPublish(path string, fresh func() ([]byte, error)) ([]byte, error) {
	for range 2 {
		data, err := os.ReadFile(path)
		if !errors.Is(err, fs.ErrNotExist) {
			return data, err
		}
		if data, err = fresh(); err != nil {
			return nil, err
		}
		if err := Publish(TmpName(path), path, data, false); err != nil && !errors.Is(err, unix.EEXIST) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("%s: published, then not found", path)
}

// TmpName is a name beside path for one writer's temporary file of it:
// path.tmp-<8 random hex digits>.
func TmpName(path string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return path + ".tmp-" + hex.EncodeToString(b[:])
}
