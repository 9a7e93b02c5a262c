package loop

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/hostos/ofd"
)

const (
	// maxAttachAttempts bounds the retries when another process attaches
	// the device LOOP_CTL_GET_FREE gave us before we configure it.
	maxAttachAttempts = 10
	// attachBackoff is added per attempt after the first retry, for the
	// case where GET_FREE keeps returning a device someone holds claimed.
	attachBackoff = 5 * time.Millisecond
)

func attach(ctx context.Context, backingFile string, opts Options) (Device, error) {
	if err := ctx.Err(); err != nil {
		return Device{}, fmt.Errorf("loop: attach %s: %w", backingFile, err)
	}
	path, err := filepath.Abs(backingFile)
	if err != nil {
		return Device{}, fmt.Errorf("loop: attach %s: %w", backingFile, err)
	}
	// The backing fd's mode decides what the kernel allows: a read-only fd
	// makes a read-only device even without LO_FLAGS_READ_ONLY.
	fileFlags := unix.O_RDWR
	if opts.ReadOnly {
		fileFlags = unix.O_RDONLY
	}
	file, err := openFD(path, fileFlags)
	if err != nil {
		return Device{}, fmt.Errorf("loop: attach: %w", err)
	}
	defer unix.Close(file) // the kernel keeps its own reference
	if opts.Lock {
		if err := lockBacking(file, opts.ReadOnly); err != nil {
			return Device{}, fmt.Errorf("loop: attach %s: %w", path, err)
		}
	} else if opts.Mark {
		// Best effort (Options.Mark): the lock lives on the open file
		// description the device is configured on, so it is released
		// with the device whoever dies; an attach that fails releases it
		// with our close.
		_ = ofd.TryLockFD(file, ofd.Read, ofd.Whole)
	}
	return attachFD(ctx, file, path, opts)
}

// lockBacking takes Options.Lock's lock on the backing file fd without
// waiting: ErrLocked when another open file description holds a
// conflicting one. Should the attach then fail, closing fd (our only
// reference) releases it.
func lockBacking(fd int, readOnly bool) error {
	typ := ofd.Write
	if readOnly {
		typ = ofd.Read
	}
	err := ofd.TryLockFD(fd, typ, ofd.Whole)
	if errors.Is(err, ofd.ErrHeld) {
		// Reads "... (F_OFD_SETLK: <errno>)"; the errno stays reachable.
		return fmt.Errorf("%w (%w)", ErrLocked, err)
	}
	if err != nil {
		return fmt.Errorf("lock the backing file: %w", err)
	}
	return nil
}

func attachFile(ctx context.Context, f *os.File, opts Options) (Device, error) {
	if err := ctx.Err(); err != nil {
		return Device{}, fmt.Errorf("loop: attach %s: %w", f.Name(), err)
	}
	path, err := filepath.Abs(f.Name())
	if err != nil {
		return Device{}, fmt.Errorf("loop: attach %s: %w", f.Name(), err)
	}
	sc, err := f.SyscallConn()
	if err != nil {
		return Device{}, fmt.Errorf("loop: attach %s: %w", path, err)
	}
	var (
		d     Device
		opErr error
	)
	// Control keeps f's descriptor valid for the whole call even if another
	// goroutine closes f.
	if err := sc.Control(func(fd uintptr) {
		flags, err := unix.FcntlInt(fd, unix.F_GETFL, 0)
		if err != nil {
			opErr = fmt.Errorf("loop: attach %s: F_GETFL: %w", path, err)
			return
		}
		// A read-only fd would silently make a read-only device; a
		// write-only one cannot back a device at all.
		if mode := flags & unix.O_ACCMODE; mode == unix.O_WRONLY || mode == unix.O_RDONLY && !opts.ReadOnly {
			opErr = fmt.Errorf("loop: attach %s: file not open for reading and writing (flags %#o): open it O_RDWR or set ReadOnly", path, flags)
			return
		}
		d, opErr = attachFD(ctx, int(fd), path, opts)
	}); err != nil {
		return Device{}, fmt.Errorf("loop: attach %s: %w", path, err)
	}
	return d, opErr
}

// attachFD configures a free loop device on the open backing file fd, which
// the kernel takes its own reference to (the same open file description).
func attachFD(ctx context.Context, file int, path string, opts Options) (Device, error) {
	loFlags := uint32(0)
	if opts.ReadOnly {
		loFlags = unix.LO_FLAGS_READ_ONLY
	}
	if opts.DirectIO {
		loFlags |= unix.LO_FLAGS_DIRECT_IO
	}
	// No LO_FLAGS_AUTOCLEAR: block volumes are bind-mounted device nodes that
	// hold no open file, so autoclear would detach them at our close.
	ctl, err := openFD(loopControl, unix.O_RDWR)
	if err != nil {
		return Device{}, fmt.Errorf("loop: attach %s: %w", path, err)
	}
	defer unix.Close(ctl)

	cfg := unix.LoopConfig{Fd: uint32(file), Size: opts.BlockSize}
	cfg.Info.Flags = loFlags
	// lo_file_name is informational (LOOP_GET_STATUS, losetup); sysfs
	// reports the real path. Keep the last byte NUL as the kernel does.
	// It carries Options.Owner when one is given (the one name the
	// device keeps for us: this kernel drops the crypt name).
	name := path
	if opts.Owner != "" {
		name = ownerPrefix + opts.Owner
	}
	copy(cfg.Info.File_name[:len(cfg.Info.File_name)-1], name)

	var lastErr error
	for attempt := range maxAttachAttempts {
		if attempt > 0 {
			if err := sleep(ctx, time.Duration(attempt-1)*attachBackoff); err != nil {
				return Device{}, fmt.Errorf("loop: attach %s: %w (last attempt: %w)", path, err, lastErr)
			}
		}
		n, err := getFree(ctl)
		if err != nil {
			// ENOSPC/ENODEV: the max_loop limit is reached.
			return Device{}, fmt.Errorf("loop: attach %s: %w: LOOP_CTL_GET_FREE: %w", path, ErrNoDevice, err)
		}
		d, err := attachTo(n, cfg, path, opts.ReadOnly)
		if err == nil {
			if opts.Scheduler != "" {
				// Before anyone has the device: nothing queued to drain.
				_ = setScheduler(sysBlock, n, opts.Scheduler)
			}
			return d, nil
		}
		// EBUSY: someone configured or claimed the device first.
		// ENXIO: someone removed it (LOOP_CTL_REMOVE) before we opened it.
		if !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.ENXIO) {
			return Device{}, err
		}
		lastErr = err
	}
	return Device{}, fmt.Errorf("loop: attach %s: %w after %d attempts: %w", path, ErrNoDevice, maxAttachAttempts, lastErr)
}

// attachTo configures /dev/loopN with cfg (a copy: the direct I/O fallback
// must not leak into other attempts) and reads the result back from sysfs.
func attachTo(n int, cfg unix.LoopConfig, backing string, readOnly bool) (Device, error) {
	dev := devPath(n)
	if err := ensureNode(dev, filepath.Join(sysBlock, "loop"+strconv.Itoa(n))); err != nil {
		return Device{}, fmt.Errorf("loop: attach %s: %w", backing, err)
	}
	// The device must be opened for writing too: the kernel makes the device
	// read-only when the fd LOOP_CONFIGURE arrives on is read-only.
	mode := unix.O_RDWR
	if readOnly {
		mode = unix.O_RDONLY
	}
	fd, err := openFD(dev, mode)
	if err != nil {
		return Device{}, fmt.Errorf("loop: attach %s: %w", backing, err)
	}
	defer unix.Close(fd)
	configure := func(c *unix.LoopConfig) error { return unix.IoctlLoopConfigure(fd, c) }
	if err := configureFallback(&cfg, configure); err != nil {
		return Device{}, fmt.Errorf("loop: attach %s: LOOP_CONFIGURE %s: %w", backing, dev, err)
	}
	d, attached, err := readDevice(sysBlock, n, nil)
	if err == nil && !attached {
		err = errors.New("sysfs shows no backing file")
	}
	if err != nil {
		// Leave nothing half-done behind: the device is ours, clear it.
		if cerr := clearFD(fd); cerr != nil {
			err = errors.Join(err, fmt.Errorf("LOOP_CLR_FD: %w", cerr))
		}
		return Device{}, fmt.Errorf("loop: attach %s: read back %s: %w", backing, dev, err)
	}
	return d, nil
}

// configureFallback issues LOOP_CONFIGURE and, when direct I/O was asked
// for and the kernel refuses the configuration with EINVAL (older kernels do
// when the backing filesystem cannot do O_DIRECT or the block sizes are
// misaligned), retries once with buffered I/O. Kernel 6.18 instead accepts
// the request and silently uses buffered I/O; either way the Device read back
// from sysfs tells the truth.
func configureFallback(cfg *unix.LoopConfig, configure func(*unix.LoopConfig) error) error {
	err := configure(cfg)
	if errors.Is(err, unix.EINVAL) && cfg.Info.Flags&unix.LO_FLAGS_DIRECT_IO != 0 {
		cfg.Info.Flags &^= unix.LO_FLAGS_DIRECT_IO
		err = configure(cfg)
	}
	return err
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// locked reports whether an open file description holds a lock on path
// that a write lock would conflict with (F_OFD_GETLK): a device attached
// with Options.Lock, here or, on a filesystem that carries OFD locks to
// its server, on another host.
func locked(path string) (bool, error) {
	fd, err := openFD(path, unix.O_RDONLY)
	if errors.Is(err, unix.ENOENT) {
		return false, nil // no file, no holder (a blank volume not used yet)
	}
	if err != nil {
		return false, fmt.Errorf("loop: lock query %s: %w", path, err)
	}
	defer unix.Close(fd)
	_, held, err := ofd.ConflictFD(fd, ofd.Write, ofd.Whole)
	if err != nil {
		return false, fmt.Errorf("loop: lock query %s: F_OFD_GETLK: %w", path, err)
	}
	return held, nil
}
