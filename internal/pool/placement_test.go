package pool

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/testutil"
	"github.com/filevol/filevol/internal/volume"
)

// On ext4 Open marks the pool root as a top directory before it makes
// volumes/ and snapshots/ (placement.go); elsewhere it leaves no trace and
// the pool opens all the same.
func TestOpenMarksPoolRootTopDir(t *testing.T) {
	dir := testutil.Scratch(t, "pool-placement") + "/pool"
	openPool(t, dir, Options{})

	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	if st.Type != unix.EXT4_SUPER_MAGIC {
		t.Skipf("scratch directory is not on ext4 (statfs type %#x): the hint does not apply", st.Type)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	flags, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
	if err != nil {
		t.Fatalf("FS_IOC_GETFLAGS %s: %v", dir, err)
	}
	if flags&fsTopdirFL == 0 {
		t.Errorf("pool root %s flags %#x: FS_TOPDIR_FL (%#x) not set", dir, flags, fsTopdirFL)
	}
}

// A filesystem without inode flags (tmpfs refuses FS_IOC_GETFLAGS) must
// not stop a pool from opening there.
func TestOpenOnFilesystemWithoutInodeFlags(t *testing.T) {
	var st unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &st); err != nil || st.Type != unix.TMPFS_MAGIC {
		t.Skip("no tmpfs at /dev/shm")
	}
	dir, err := os.MkdirTemp("/dev/shm", "filevol-placement-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	p := openPool(t, dir+"/pool", Options{})
	mustCreate(t, p, volume.CreateRequest{Name: "on-tmpfs", CapacityBytes: 1 << 20})
}
