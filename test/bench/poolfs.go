package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/hostos/loop"
)

// poolFSSize is the size of the loop-backed pool filesystem (sparse: only
// what is written takes room on the disk below).
const poolFSSize = 16 << 30

// mkfs makes the loop-backed pool filesystems. noinit_itable (at mount)
// keeps ext4's lazy inode-table zeroing from writing in the background
// while the bench measures.
var mkfs = map[string][]string{
	"ext4": {"mkfs.ext4", "-F", "-q", "-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard"},
	// The bench VM's root filesystem has no journal; a fresh one has no
	// recently freed inodes either (ext4Journal), which makes it the place
	// to compare driver changes run after run.
	"ext4-nojournal": {"mkfs.ext4", "-F", "-q", "-O", "^has_journal", "-E", "lazy_itable_init=1,nodiscard"},
	"xfs":            {"mkfs.xfs", "-f", "-q", "-K"},
	// btrfs is for the directory pools of the tree-delete phase only.
	"btrfs": {"mkfs.btrfs", "-f", "-q", "-K"},
}

// preparePoolFS decides what filesystem the pool lives on. "host" is the
// filesystem of /tmp as it is (what the targets are about). ext4 and xfs
// are made on a loop device over a sparse file under the run directory, to
// compare journaled filesystems on the same disk; tmpfs takes the disk
// out entirely, leaving the driver's CPU path. Everything made here lives
// under runDir, so CleanLeftovers removes it.
func (b *bench) preparePoolFS(ctx context.Context) error {
	fsType := b.cfg.poolFS
	if fsType == "host" {
		return os.MkdirAll(b.poolDir, 0o700)
	}
	mnt := filepath.Join(b.runDir, "poolfs")
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		return err
	}
	b.poolDir = filepath.Join(mnt, "pool")
	if fsType == "tmpfs" {
		if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=8g,mode=0700"); err != nil {
			return fmt.Errorf("mount tmpfs at %s: %w", mnt, err)
		}
		return os.MkdirAll(b.poolDir, 0o700)
	}
	if _, ok := mkfs[fsType]; !ok || fsType == "btrfs" {
		return fmt.Errorf("--pool-fs %q: want host, ext4, ext4-nojournal, xfs or tmpfs", fsType)
	}
	if err := makeLoopFS(ctx, filepath.Join(b.runDir, "poolfs.img"), mnt, fsType, poolFSSize); err != nil {
		return err
	}
	return os.MkdirAll(b.poolDir, 0o700)
}

// makeLoopFS makes a fsType filesystem (a key of mkfs) on a loop device
// over a sparse file img of size bytes and mounts it at mnt. Both live
// under the run directory, so CleanLeftovers removes them after a kill.
func makeLoopFS(ctx context.Context, img, mnt, fsType string, size int64) error {
	argv, ok := mkfs[fsType]
	if !ok {
		return fmt.Errorf("no mkfs for %q", fsType)
	}
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		return err
	}
	if err := os.Truncate(img, size); err != nil {
		return err
	}
	// Direct I/O: the pool's fsyncs reach the disk below instead of
	// stopping in the page cache of the image file.
	dev, err := loop.Attach(ctx, img, loop.Options{DirectIO: true})
	if err != nil {
		return fmt.Errorf("attach %s: %w", img, err)
	}
	cmd := exec.CommandContext(ctx, argv[0], append(argv[1:], dev.Path)...)
	cmd.Env = []string{"LC_ALL=C", "PATH=/usr/sbin:/sbin:/usr/bin:/bin"}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", argv[0], dev.Path, err, strings.TrimSpace(string(out)))
	}
	kind, opts := fsType, ""
	if strings.HasPrefix(fsType, "ext4") {
		kind, opts = "ext4", "noinit_itable"
	}
	if err := unix.Mount(dev.Path, mnt, kind, 0, opts); err != nil {
		return fmt.Errorf("mount %s at %s: %w", dev.Path, mnt, err)
	}
	return nil
}

// ext4Journal says whether the ext4 filesystem on source has a journal:
// jbd2 lists every journal it runs in /proc/fs/jbd2/<dev>-<n>. Without
// one, fsync writes each metadata block synchronously, and inode
// allocation skips inodes freed in the last minutes (recently_deleted).
func ext4Journal(source string) string {
	if hasJournal(source) {
		return "with a journal"
	}
	return "WITHOUT a journal (no /proc/fs/jbd2/" + filepath.Base(source) + "-*)"
}

func hasJournal(source string) bool {
	m, _ := filepath.Glob("/proc/fs/jbd2/" + filepath.Base(source) + "-*")
	return len(m) > 0
}
