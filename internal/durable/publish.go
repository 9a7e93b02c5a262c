package durable

import (
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
