package pool

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"slices"
	"testing"
)

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

// mustUse does what a volume's first stage does to its image: make it if
// it is a thin blank one not used yet, and commit it (pending.go).
func mustUse(tb testing.TB, p *Pool, v Volume) Volume {
	tb.Helper()
	v, err := p.CommitImage(v)
	if err != nil {
		tb.Fatalf("CommitImage(%s): %v", v.ID, err)
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
