// Package fs runs filesystem programs (blkid, mkfs.*, resize2fs, xfs_growfs,
// btrfs) with argument lists under the caller's context — never a shell, always
// LC_ALL=C — and wraps statfs and the freeze ioctls. It must not import gRPC,
// CSI or pool.
package fs

import (
	"context"
	"errors"
)

// Sentinel errors; callers test them with errors.Is.
var (
	// ErrUnsupported: the filesystem type is not one filevol handles.
	ErrUnsupported = errors.New("unsupported filesystem type")
	// ErrToolMissing: the program needed is not installed.
	ErrToolMissing = errors.New("program not installed")
	// ErrNotMountPoint: Freeze, Thaw or Grow was given a path that is not
	// the root of a mount (acting on it would hit the filesystem below).
	ErrNotMountPoint = errors.New("not a mount point")
)

// Types filevol can format, in the order they are documented.
var Types = []string{"ext4", "xfs", "btrfs"}

// MinSize is the smallest device each filesystem's mkfs accepts, in bytes.
var MinSize = map[string]int64{
	"ext4":  1 << 20,
	"xfs":   300 << 20,
	"btrfs": 128 << 20,
}

// ExitError is returned when a program ran and failed.
type ExitError struct {
	Program string
	Args    []string
	Code    int
	Stderr  string // last few hundred bytes of stderr
}

func (e *ExitError) Error() string { return exitErrorString(e) }

// Runner runs programs. Exec is the real implementation; tests may swap in
// a recorder.
type Runner interface {
	Run(ctx context.Context, program string, args ...string) (stdout []byte, err error)
}

// Exec runs programs with exec.CommandContext and LC_ALL=C.
type Exec struct{}

// Run implements Runner.
func (Exec) Run(ctx context.Context, program string, args ...string) ([]byte, error) {
	return run(ctx, program, args...)
}

// Tools formats, probes and grows filesystems using a Runner.
type Tools struct{ R Runner }

// Probe returns the filesystem (or other signature) type found on dev, or ""
// when the device carries no signature at all (blkid -p exits 2).
func (t Tools) Probe(ctx context.Context, dev string) (string, error) { return t.probe(ctx, dev) }

// FormatOptions are what a Format makes beyond the filesystem's type.
type FormatOptions struct {
	// Encrypt makes a filesystem that can hold encrypted directories
	// (fscrypt): ext4 with the encrypt feature. The other types have no
	// such feature (xfs has no fscrypt; btrfs has none in the kernels
	// filevol runs on): ErrUnsupported.
	Encrypt bool
}

// Format makes a filesystem of fstype on dev, with at most one opts.
// Callers MUST Probe first: Format never checks and always forces
// (filevol never reformats data).
func (t Tools) Format(ctx context.Context, dev, fstype string, opts ...FormatOptions) error {
	var o FormatOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	return t.format(ctx, dev, fstype, o)
}

// Grow grows the filesystem on dev, mounted at mountPoint, to fill the device.
func (t Tools) Grow(ctx context.Context, dev, mountPoint, fstype string) error {
	return t.grow(ctx, dev, mountPoint, fstype)
}

// Stats is what statfs says about a mounted filesystem.
type Stats struct {
	TotalBytes, AvailableBytes, UsedBytes int64
	TotalInodes, FreeInodes, UsedInodes   int64
}

// StatFS returns usage of the filesystem mounted at path.
func StatFS(path string) (Stats, error) { return statFS(path) }

// BlockDeviceSize returns the size of a block device (BLKGETSIZE64).
func BlockDeviceSize(dev string) (int64, error) { return blockDeviceSize(dev) }

// Freeze freezes the filesystem mounted at mountPoint (FIFREEZE); Thaw
// thaws it (FITHAW). Thawing a filesystem that is not frozen is not an error.
func Freeze(mountPoint string) error { return freeze(mountPoint) }

// Thaw thaws the filesystem mounted at mountPoint.
func Thaw(mountPoint string) error { return thaw(mountPoint) }
