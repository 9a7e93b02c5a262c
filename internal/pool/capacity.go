package pool

import (
	"fmt"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/durable"
	"github.com/filevol/filevol/internal/volume"
)

// capacity is statfs of the pool plus the index's provisioned total; on a
// node-local pool no record is read, so GetCapacity polling stays cheap
// (a shared pool's are re-read first: other hosts change them). Thick volumes cost one
// FIEMAP each (thick.go); thin ones nothing.
func (p *Pool) capacity() (volume.Capacity, error) {
	free, total, err := p.statfs()
	if err != nil {
		return volume.Capacity{}, err
	}
	p.refresh(p.vols.Refresh)
	unbacked := p.unbackedBytes()
	return volume.Capacity{
		TotalBytes:       total,
		FreeBytes:        free,
		ReservedBytes:    p.opts.ReservedBytes,
		UnbackedBytes:    unbacked,
		AvailableBytes:   max(0, free-p.opts.ReservedBytes-unbacked),
		ProvisionedBytes: p.vols.Total(),
	}, nil
}

// statfs returns the bytes available to unprivileged writers (Bavail: the
// root-reserved blocks are not the pool's to promise) and the total size.
func (p *Pool) statfs() (free, total int64, err error) {
	var st unix.Statfs_t
	if err := durable.IgnoringEINTR(func() error { return unix.Statfs(p.dir, &st) }); err != nil {
		return 0, 0, fmt.Errorf("statfs %s: %w", p.dir, err)
	}
	// Block counts are in fragment-size units; Frsize equals Bsize on
	// ext4/xfs/btrfs but not on every filesystem.
	unit := int64(st.Frsize)
	if unit <= 0 {
		unit = int64(st.Bsize)
	}
	return int64(st.Bavail) * unit, int64(st.Blocks) * unit, nil
}

// refresh re-reads a shared pool's records into the index before an
// answer built from it (a list, the capacity): other hosts create and
// delete in the same directory, and a controller replica that was
// standing by would otherwise answer from what it loaded at its start.
// A node-local pool's index is complete (this process makes every
// change). A failed read is logged: the answer comes from the index.
func (p *Pool) refresh(fn func() error) {
	if !p.opts.Shared {
		return
	}
	if err := fn(); err != nil {
		klog.ErrorS(err, "Re-read the shared pool's records; answering from the index", "dir", p.dir)
	}
}
