package sparse

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// copyNonZero copies every byte and leaves zeros as holes: a source with
// written zeros, data across a block's edge, a short tail.
func TestCopyNonZeroLeavesZerosAsHoles(t *testing.T) {
	dir := t.TempDir()
	size := int64(3*zeroScan + 12345)
	src := make([]byte, size)
	copy(src[zeroBlock-3:], "across a block's edge")
	copy(src[2*zeroScan+5:], "in the third read")
	src[size-1] = 9
	if err := os.WriteFile(filepath.Join(dir, "src"), src, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := os.Open(filepath.Join(dir, "src"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	d, err := os.Create(filepath.Join(dir, "dst"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Truncate(size); err != nil {
		t.Fatal(err)
	}
	if err := copyNonZero(context.Background(), int(s.Fd()), int(d.Fd()), size); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(d.Name())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, src) {
		t.Fatal("the copy differs from its source")
	}
	// Where the filesystem reports holes (not ceph-fuse), the zeros
	// written into the source are holes in the copy.
	if off, err := unix.Seek(int(d.Fd()), 0, unix.SEEK_DATA); err == nil && off != 0 {
		t.Fatalf("SEEK_DATA 0 = %d, want 0 (a block with data)", off)
	}
	if off, err := unix.Seek(int(d.Fd()), 0, unix.SEEK_HOLE); err == nil && off != 2*zeroBlock {
		t.Errorf("SEEK_HOLE 0 = %d, want %d: the zeros after the first two blocks were written", off, 2*zeroBlock)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(d.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	t.Logf("copy of %d bytes allocates %d", size, st.Blocks*512)
}
