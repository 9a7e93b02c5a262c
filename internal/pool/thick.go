package pool

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/durable"
	"github.com/filevol/filevol/internal/hostos/extents"
	"github.com/filevol/filevol/internal/volume"
)

// Thick volumes are fallocated, so statfs already counts their space as
// used — until two things make the promise hollow: a reflink snapshot or
// clone shares their extents (the next write to a shared block needs a new
// one: copy on write), and a discard (btrfs mounts with discard=async, an
// fstrim) punches holes through the loop device. What a thick volume does
// not hold exclusively must still be kept free for it, so GetCapacity
// subtracts what thick volumes have reserved but not yet written. FIEMAP
// (internal/hostos/extents) tells both apart: extents flagged SHARED, and
// the gaps.

// unbackedBytes sums, over the thick volumes of the index, the bytes of
// their capacity not held exclusively. An image that is gone promises
// nothing; one that cannot be mapped counts in full: better to promise
// too little than too much.
func (p *Pool) unbackedBytes() int64 {
	var total int64
	for _, v := range p.thickVolumes() {
		excl, err := exclusiveBytes(p.imagePath(v.ID))
		if err == unix.ENOENT {
			continue
		}
		if err != nil {
			klog.V(2).InfoS("Cannot map a thick image; counting it as unbacked", "volumeID", v.ID, "err", err)
		}
		total += max(0, v.CapacityBytes-excl)
	}
	return total
}

// exclusiveBytes is the size of the file's extents that no other file
// shares (written, unwritten or delayed allocation alike). Where FIEMAP is
// missing (tmpfs) so is reflink, and the allocated size is the answer.
func exclusiveBytes(path string) (int64, error) {
	var fd int
	if err := durable.IgnoringEINTR(func() (err error) {
		fd, err = unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		return err
	}); err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	es, err := extents.Map(fd)
	if errors.Is(err, extents.ErrUnsupported) {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return 0, err
		}
		return st.Blocks * 512, nil
	}
	var total int64
	for _, e := range es {
		if e.Flags&extents.FlagShared == 0 {
			total += e.Length
		}
	}
	return total, err
}

// thickVolumes returns the thick volumes of the index (their Parameters
// shared: only IDs and capacities are read).
func (p *Pool) thickVolumes() []volume.Volume {
	var out []volume.Volume
	p.vols.Each(func(v volume.Volume) {
		if v.Provisioning == volume.ProvisioningThick {
			out = append(out, v)
		}
	})
	return out
}

// preallocate allocates [off, off+n) of the image open at fd (fallocate
// mode 0, which extends the length too). Where the filesystem cannot,
// the error wraps volume.ErrInvalidArgument and EOPNOTSUPP: thick
// provisioning is then a class this pool cannot honour. CephFS is refused
// before any call: ceph-fuse answers mode 0 by setting the length and
// allocating nothing (a 256 MiB image held one RADOS object and the pool's
// room did not change; test/ceph TestThickRefusedOnCephFS), so a thick
// volume there would be a thin one whose writes can find the pool full,
// yet counted as backed: st_blocks follows the length, and GetCapacity's
// figure did not move for a 256 MiB thick volume. The kernel's CephFS
// client answers mode 0 EOPNOTSUPP by its source (not measured: the
// kernel here has no CephFS client).
func preallocate(fd int, off, n int64) error {
	if onCephFS(fd) {
		return fmt.Errorf("%w: provisioning %q: the pool filesystem cannot preallocate (CephFS reserves no space ahead of writes; use %q) (%w)",
			volume.ErrInvalidArgument, volume.ProvisioningThick, volume.ProvisioningThin, unix.EOPNOTSUPP)
	}
	err := durable.IgnoringEINTR(func() error { return unix.Fallocate(fd, 0, off, n) })
	if err == unix.EOPNOTSUPP {
		return fmt.Errorf("%w: provisioning %q: the pool filesystem cannot preallocate (%w)",
			volume.ErrInvalidArgument, volume.ProvisioningThick, err)
	}
	return err
}

// onCephFS reports whether fd is a file of a CephFS: every file there has
// the virtual attribute ceph.file.layout, which no other filesystem has.
func onCephFS(fd int) bool {
	_, err := unix.Fgetxattr(fd, "ceph.file.layout", nil)
	return err == nil || err == unix.ERANGE
}
