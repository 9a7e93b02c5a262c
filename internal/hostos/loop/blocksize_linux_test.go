package loop_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/filevol/filevol/internal/hostos/loop"
)

// TestAttachBlockSize: an explicit block size is the device's logical block
// size, whatever the backing file's O_DIRECT alignment, and direct I/O
// stays on (4 KiB is a multiple of every alignment).
func TestAttachBlockSize(t *testing.T) {
	dir := setup(t)
	for _, bs := range []uint32{512, 4096} {
		img := newImage(t, dir, "bs-"+strconv.Itoa(int(bs))+".img", 16<<20)
		d := mustAttach(t, img, loop.Options{DirectIO: true, BlockSize: bs})
		raw, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(d.Path), "queue/logical_block_size"))
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(string(raw)); got != map[uint32]string{512: "512", 4096: "4096"}[bs] {
			t.Errorf("BlockSize %d: logical_block_size %s", bs, got)
		}
		if bs == 4096 && !d.DirectIO {
			t.Errorf("BlockSize 4096 turned direct I/O off")
		}
	}
}
