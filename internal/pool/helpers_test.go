package pool

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// scratch returns /tmp/filevol-test/pool-<name>, removing what a killed run
// left there first and the directory itself after the test. (Same contract
// as internal/testutil.Scratch, which this can switch to once it lands.)
func scratch(tb testing.TB, name string) string {
	tb.Helper()
	dir := filepath.Join("/tmp/filevol-test", "pool-"+name)
	if err := os.RemoveAll(dir); err != nil {
		tb.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// openPool opens a pool in dir and closes it after the test.
func openPool(tb testing.TB, dir string, opts Options) *Pool {
	tb.Helper()
	if opts.NodeID == "" {
		opts.NodeID = "node-1"
	}
	p, err := Open(dir, opts)
	if err != nil {
		tb.Fatalf("Open(%s): %v", dir, err)
	}
	tb.Cleanup(func() { _ = p.Close() })
	return p
}

func mustCreate(tb testing.TB, p *Pool, req CreateRequest) Volume {
	tb.Helper()
	v, err := p.Create(context.Background(), req)
	if err != nil {
		tb.Fatalf("Create(%q): %v", req.Name, err)
	}
	return v
}

// ls lists a directory's names, sorted.
func ls(tb testing.TB, dir string) []string {
	tb.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		tb.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	return names
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

const gib = int64(1) << 30
