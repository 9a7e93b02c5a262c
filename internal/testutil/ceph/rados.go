package ceph

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/filevol/filevol/internal/testutil/procs"
)

// DataPool is the CephFS's data pool, where files' contents are kept as
// RADOS objects named <inode in hex>.<object number, 8 hex digits>, 4 MiB
// of the file each by default; an object exists only once something was
// written in its range.
const DataPool = FSName + "_data"

// FileObjects counts the data pool's objects of the file with inode ino
// (as stat shows it through any client): how much of a sparse file the
// cluster has allocated, by whole objects. A client flushes what it wrote
// on fsync.
func (c *Cluster) FileObjects(t testing.TB, ino uint64) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", "--net="+filepath.Join(procs.NetnsDir, c.held.ServerNS), "--",
		"rados", "-c", c.Conf(), "-n", "client.admin", "-p", DataPool, "ls")
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("ceph: rados ls: %v: %s", err, stderr.String())
	}
	prefix, n := fmt.Sprintf("%x.", ino), 0
	for _, name := range strings.Fields(out.String()) {
		if strings.HasPrefix(name, prefix) {
			n++
		}
	}
	return n
}
