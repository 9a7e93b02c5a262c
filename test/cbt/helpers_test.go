// Package cbt tests changed-block tracking (the CSI SnapshotMetadata
// service) on the real kernel: pools on xfs and btrfs (reflink: the delta
// from extent maps) and ext4 (copies: the delta from the data) made on
// loop files, the real driver over its socket (test/driver), the images
// compared byte by byte. Root only.
package cbt

import (
	"context"
	"errors"
	"io"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/filevol/filevol/test/driver"
)

// startOn starts the driver on a pool filesystem of fsType (size bytes,
// sparse) made on a loop file (driver.StartOnFilesystem).
func startOn(t *testing.T, fsType string, size int64) *driver.Driver {
	t.Helper()
	return driver.StartOnFilesystem(t, "cbt-"+fsType, fsType, size)
}

// ranges is a stream's ranges and capacity.
type ranges struct {
	list     [][2]int64 // offset, length
	capacity int64
}

// covers reports whether [off, off+n) lies within the ranges.
func (r ranges) covers(off, n int64) bool {
	for _, x := range r.list {
		if x[0] <= off && off+n <= x[0]+x[1] {
			return true
		}
	}
	return false
}

func (r ranges) bytes() int64 {
	var sum int64
	for _, x := range r.list {
		sum += x[1]
	}
	return sum
}

type metaMessage interface {
	GetVolumeCapacityBytes() int64
	GetBlockMetadata() []*csipb.BlockMetadata
}

func collect[M metaMessage](t *testing.T, recv func() (M, error)) ranges {
	t.Helper()
	var r ranges
	for {
		m, err := recv()
		if errors.Is(err, io.EOF) {
			return r
		}
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		r.capacity = m.GetVolumeCapacityBytes()
		for _, b := range m.GetBlockMetadata() {
			if n := len(r.list); n > 0 && b.GetByteOffset() < r.list[n-1][0]+r.list[n-1][1] {
				t.Fatalf("tuple %v overlaps or precedes the one before", b)
			}
			r.list = append(r.list, [2]int64{b.GetByteOffset(), b.GetSizeBytes()})
		}
	}
}

func allocated(t *testing.T, d *driver.Driver, id string) ranges {
	t.Helper()
	s, err := d.Meta.GetMetadataAllocated(context.Background(), &csipb.GetMetadataAllocatedRequest{SnapshotId: id, MaxResults: 64})
	if err != nil {
		t.Fatal(err)
	}
	return collect(t, s.Recv)
}

func delta(t *testing.T, d *driver.Driver, base, target string) ranges {
	t.Helper()
	s, err := d.Meta.GetMetadataDelta(context.Background(), &csipb.GetMetadataDeltaRequest{BaseSnapshotId: base, TargetSnapshotId: target, MaxResults: 64})
	if err != nil {
		t.Fatal(err)
	}
	return collect(t, s.Recv)
}
