package ceph_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/filevol/filevol/internal/volume"
)

// What a restore costs on CephFS, where it is a copy: one large file
// (MiB/s, copy_file_range) and many small ones (files/s, each a create,
// a copy, an owner, a mode and times, every one a round trip to the MDS).
// The figures are logged for docs/shared-pools-cephfs.md; the assertions
// are that each restore is whole.
func TestDirectoryRestoreCostOnCephFS(t *testing.T) {
	_, a, b := twoNodes(t)
	ctx := context.Background()
	p, _ := openDirPool(t, a)
	const dataMiB, files = 32, 200
	big := dirVolume(t, p, "big", (dataMiB+1)*mib, nil)
	chunk := bytes.Repeat([]byte("0123456789abcdef"), mib/16)
	f, err := os.Create(filepath.Join(a, big.Path, "big"))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < dataMiB; i++ {
		if _, err := f.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	many := dirVolume(t, p, "many", 16*mib, nil)
	for i := range files {
		if err := os.WriteFile(filepath.Join(a, many.Path, fmt.Sprintf("f%04d", i)), []byte("small file"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		v    string
		size int64
		what func(time.Duration) string
	}{
		{big.ID, big.CapacityBytes, func(d time.Duration) string {
			return fmt.Sprintf("%d MiB in one file: %v, %.0f MiB/s", dataMiB, d.Round(time.Millisecond), dataMiB/d.Seconds())
		}},
		{many.ID, many.CapacityBytes, func(d time.Duration) string {
			return fmt.Sprintf("%d files of 10 bytes: %v, %.0f files/s", files, d.Round(time.Millisecond), files/d.Seconds())
		}},
	} {
		s, err := p.CreateSnapshot(ctx, volume.SnapshotRequest{Name: "s-" + c.v, SourceVolumeID: c.v})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		r := dirVolume(t, p, "r-"+c.v, c.size, &volume.ContentSource{Kind: volume.SourceSnapshot, ID: s.ID})
		t.Logf("restore of %s", c.what(time.Since(start)))
		src, _ := p.Record(c.v)
		sameTree(t, filepath.Join(b, src.Path), filepath.Join(b, r.Path))
	}
}
