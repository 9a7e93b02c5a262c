package pool

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/filevol/filevol/internal/volid"
	"github.com/filevol/filevol/internal/volume"
)

// testPoolID is the ID of every pool openPool opens, so that the tests
// can name a volume's ID before its pool is open.
const testPoolID = "7e57c0de"

// VolumeID and SnapshotID are the IDs a pool of openPool gives names.
func VolumeID(name string) string   { return volid.NewVolume(volid.KindImage, testPoolID, name) }
func SnapshotID(name string) string { return volid.NewSnapshot(testPoolID, name) }

// openPool opens a pool in dir, with the identity testPoolID if it is
// new, and closes it after the test.
func openPool(tb testing.TB, dir string, opts Options) *Pool {
	tb.Helper()
	if opts.NodeID == "" {
		opts.NodeID = "node-1"
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		tb.Fatal(err)
	}
	ident := `{"version":1,"id":"` + testPoolID + `","createdAt":"2026-01-01T00:00:00Z"}`
	if f, err := os.OpenFile(filepath.Join(dir, identityFile), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600); err == nil {
		_, _ = f.WriteString(ident)
		f.Close()
	}
	p, err := Open(dir, opts)
	if err != nil {
		tb.Fatalf("Open(%s): %v", dir, err)
	}
	tb.Cleanup(func() { _ = p.Close() })
	return p
}

func mustCreate(tb testing.TB, p *Pool, req volume.CreateRequest) volume.Volume {
	tb.Helper()
	v, err := p.Create(context.Background(), req)
	if err != nil {
		tb.Fatalf("Create(%q): %v", req.Name, err)
	}
	return v
}

// mustUse does what a volume's first stage does to its image: make it if
// it is a thin blank one not used yet, and commit it (pending.go).
func mustUse(tb testing.TB, p *Pool, v volume.Volume) volume.Volume {
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
