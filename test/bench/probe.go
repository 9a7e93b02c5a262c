package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/hostos/loop"
)

// fsyncSamples is enough for a stable p50 of the disk's flush latency.
const fsyncSamples = 200

// fsyncProbe measures, on the pool's filesystem and before the driver
// runs, what a durable create cannot avoid: fsync of a small new file and
// fsync of the directory after a rename. It is the floor under target 1,
// so a MISS there can be told apart from a slow driver.
func (b *bench) fsyncProbe() {
	// The files stay until the run directory goes: on ext4 without a
	// journal, deleting them now would make every inode allocation of the
	// driver scan past them (recently_deleted) for the next minutes.
	dir := filepath.Join(filepath.Dir(b.poolDir), "fsync-probe")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		b.rep.note("fsync probe: %v", err)
		return
	}
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		b.rep.note("fsync probe: %v", err)
		return
	}
	defer unix.Close(dfd)
	record := []byte(strings.Repeat("x", 300)) // about a record's size
	var open, file, dirSync, total []time.Duration
	for i := range fsyncSamples {
		tmp, final := fmt.Sprintf("%s/.tmp-%d", dir, i), fmt.Sprintf("%s/%d", dir, i)
		start := time.Now()
		fd, err := unix.Open(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
		open = append(open, time.Since(start))
		if err != nil {
			b.rep.note("fsync probe: %v", err)
			return
		}
		_, err = unix.Write(fd, record)
		t := time.Now()
		if err == nil {
			err = unix.Fsync(fd)
		}
		file = append(file, time.Since(t))
		unix.Close(fd)
		if err == nil {
			err = unix.Rename(tmp, final)
		}
		t = time.Now()
		if err == nil {
			err = unix.Fsync(dfd)
		}
		dirSync = append(dirSync, time.Since(t))
		total = append(total, time.Since(start))
		if err != nil {
			b.rep.note("fsync probe: %v", err)
			return
		}
	}
	b.rep.detail("Pool disk: create a file (open O_CREAT, new inode)", "%s", summarize(open))
	b.rep.detail("Pool disk: fsync of a new 300-byte file", "%s", summarize(file))
	b.rep.detail("Pool disk: fsync of the directory after a rename", "%s", summarize(dirSync))
	b.rep.detail("Pool disk: create+write+fsync+rename+dir fsync (floor of a durable create)", "%s", summarize(total))

	// The pool's own create sequence (internal/pool/create.go) on bare
	// syscalls: the floor above plus the check for a stray image.
	var seq []time.Duration
	for i := range fsyncSamples {
		t := time.Now()
		if err := poolCreateSequence(dir, dfd, i, record); err != nil {
			b.rep.note("fsync probe: %v", err)
			return
		}
		seq = append(seq, time.Since(t))
	}
	b.seqP50 = summarize(seq).p50
	b.rep.detail("Pool disk: the pool's create sequence on bare syscalls (record written, fsynced, renamed; no image yet; directory fsynced; no gRPC)", "%s", summarize(seq))
}

// poolCreateSequence makes a record the way the pool does for a thin blank
// volume: record created, written, fsynced and renamed into place (the
// commit point), the image's name looked up (a stray file there would be
// quarantined; the image itself is made at first use), directory fsynced.
func poolCreateSequence(dir string, dfd, i int, record []byte) error {
	const flags = unix.O_WRONLY | unix.O_CREAT | unix.O_EXCL | unix.O_CLOEXEC
	tmpRec := fmt.Sprintf("%s/.tmp-rec-%d", dir, i)
	rec, err := unix.Open(tmpRec, flags, 0o600)
	if err != nil {
		return err
	}
	_, err = unix.Write(rec, record)
	if err == nil {
		err = unix.Fsync(rec)
	}
	unix.Close(rec)
	if err == nil {
		err = unix.Rename(tmpRec, fmt.Sprintf("%s/rec-%d", dir, i))
	}
	if err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Lstat(fmt.Sprintf("%s/img-%d", dir, i), &st); err != unix.ENOENT {
		return fmt.Errorf("stray image check: %v", err)
	}
	return unix.Fsync(dfd)
}

// poolFiles lists the regular files left in the pool, except the ones the
// pool keeps for as long as it exists or its driver runs: its lock, its
// identity (pool.json) and the running driver's freeze owner lock
// (freeze/.owner-*). Anything else is an image, a record or a temporary
// file that a delete should have removed.
func poolFiles(poolDir string) []string {
	var out []string
	_ = filepath.WalkDir(poolDir, func(p string, e fs.DirEntry, err error) error {
		rel := strings.TrimPrefix(p, poolDir+"/")
		ownFile := rel == ".lock" || rel == "pool.json" || strings.HasPrefix(rel, "freeze/.owner-")
		if err == nil && e.Type().IsRegular() && !ownFile {
			out = append(out, rel)
		}
		return nil
	})
	return out
}

// leftovers describes the mounts and loop devices still under dir once
// the driver has stopped and every volume was unpublished, unstaged and
// deleted: anything here is a leak of the driver (or of an aborted run).
// The harness's own --pool-fs mount and its loop device are not leaks.
func leftovers(dir string) (string, error) {
	mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		return "", err
	}
	var left []string
	for _, m := range mounts {
		if m.Mountpoint != filepath.Join(dir, "poolfs") {
			left = append(left, "mount "+m.Mountpoint)
		}
	}
	devs, err := loop.List()
	if err != nil {
		return "", err
	}
	for _, d := range devs {
		if strings.HasPrefix(d.BackingFile, dir+"/") && d.BackingFile != filepath.Join(dir, "poolfs.img") {
			left = append(left, fmt.Sprintf("loop %s → %s", d.Path, d.BackingFile))
		}
	}
	return strings.Join(left, ", "), nil
}
