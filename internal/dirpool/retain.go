package dirpool

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// Retained directories. A volume of a class with deleteDirectory: "false"
// keeps its data when it is deleted (the EFS driver's
// deleteAccessPointRootDir, whose default is the other way round): its
// subvolume stays where it was, at the path basePath/subPathPattern gave
// it, and a note of it is kept in <dir>/.filevol/retained/<id>.json. What
// is released is the volume's: its record (so its gid may be handed out
// again), its size limit and its level-1 qgroup. Its data still takes room
// on the pool's filesystem (GetCapacity's available bytes) but no longer
// counts as provisioned. Nothing of filevol removes it; an operator does
// (btrfs subvolume delete), after reading the note.
const retainedDir = "retained"

// Retained is the note of a retained directory.
type Retained struct {
	Version int    `json:"version"`
	ID      string `json:"id"`
	Name    string `json:"name"`
	// Path is the directory, relative to the pool's root.
	Path      string    `json:"path"`
	Subvolume uint64    `json:"subvolume"`
	UID       uint32    `json:"uid"`
	GID       uint32    `json:"gid"`
	Bytes     int64     `json:"capacityBytes"`
	PVC       string    `json:"pvc,omitempty"` // namespace/name, when known
	DeletedAt time.Time `json:"deletedAt"`
}

// retain releases v's quota and writes its note; the caller then removes
// the record. Every step is idempotent, so a retried delete after a
// crash redoes them.
func (p *Pool) retain(v Volume, params Params) error {
	fd, err := p.openVolume(v)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	note := Retained{Version: recordVersion, ID: v.ID, Name: v.Name, Path: v.Path, Subvolume: v.Subvolume,
		UID: v.UID, GID: v.GID, Bytes: v.CapacityBytes, DeletedAt: time.Now().UTC()}
	if params.PVCName != "" {
		note.PVC = params.PVCNamespace + "/" + params.PVCName
	}
	if err := p.writeNote(note); err != nil {
		return err
	}
	if err := p.quota.release(fd, v); err != nil {
		return err
	}
	klog.InfoS("Directory volume deleted, its directory retained", "volumeID", v.ID, "path", v.Path, "param", ParamDeleteDirectory)
	return unix.Syncfs(p.root)
}

func (p *Pool) writeNote(n Retained) error {
	if err := unix.Mkdirat(p.root, metaDir+"/"+retainedDir, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		return err
	}
	dir, err := p.metaFD(retainedDir)
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	data, _ := json.MarshalIndent(n, "", "  ")
	tmp := ".tmp-" + n.ID
	fd, err := unix.Openat(dir, tmp, unix.O_CREAT|unix.O_TRUNC|unix.O_WRONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	_, err = unix.Write(fd, data)
	if err == nil {
		err = unix.Fsync(fd)
	}
	_ = unix.Close(fd)
	if err == nil {
		err = unix.Renameat(dir, tmp, dir, n.ID+".json")
	}
	if err == nil {
		err = unix.Fsync(dir)
	}
	if err != nil {
		return fmt.Errorf("write the note of retained directory %s: %w", n.Path, err)
	}
	return nil
}

// RetainedDirectories lists the notes of retained directories.
func (p *Pool) RetainedDirectories() ([]Retained, error) {
	names, err := p.entries(retainedDir)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Retained
	for _, n := range names {
		if len(n) < 5 || n[len(n)-5:] != ".json" || n[0] == '.' {
			continue
		}
		data, err := os.ReadFile(filepath.Join(p.dir, metaDir, retainedDir, n))
		if err != nil {
			return nil, err
		}
		var r Retained
		if err := json.Unmarshal(data, &r); err != nil {
			return nil, fmt.Errorf("retained note %s: %w", n, err)
		}
		out = append(out, r)
	}
	return out, nil
}
