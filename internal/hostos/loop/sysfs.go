package loop

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

const (
	// devDir holds the device nodes the kernel (devtmpfs) or we create.
	devDir = "/dev"
	// sysBlock lists every loop device that exists, attached or not, as
	// loopN. A device is attached exactly when loopN/loop/backing_file
	// exists: the kernel adds the "loop" attribute group on LOOP_CONFIGURE
	// and removes it when the device is cleared.
	sysBlock = "/sys/block"
	// deletedSuffix is what the kernel's d_path appends to the backing file
	// when it has been unlinked. A file whose real name ends in " (deleted)"
	// is indistinguishable; filevol never creates such names.
	deletedSuffix = " (deleted)"
	// consistentReadAttempts bounds how often one device is re-read when its
	// backing file changes while its attributes are being read.
	consistentReadAttempts = 3
)

// list returns every attached loop device.
func list() ([]Device, error) { return scan(sysBlock, nil) }

// find returns the attached devices backed by path. The kernel reports the
// backing file as its canonical path in our mount namespace, so besides the
// cleaned absolute path we also match the path with symlinks resolved, and
// a device attached from another mount namespace by its identity
// (identity.go).
func find(path string) ([]Device, error) { return scan(sysBlock, matcher(path)) }

// Backing returns the devices of devs whose backing path is path, as Find
// compares it: the absolute path, or that path with symlinks resolved. It
// filters a listing the caller holds (List resolves a device attached from
// another mount namespace to its path under the pool already).
func Backing(devs []Device, path string) []Device {
	want := matchPaths(path)
	var out []Device
	for _, d := range devs {
		if slices.Contains(want, d.BackingFile) {
			out = append(out, d)
		}
	}
	return out
}

func matchPaths(path string) []string {
	clean, err := filepath.Abs(path)
	if err != nil {
		clean = filepath.Clean(path)
	}
	out := []string{clean}
	// EvalSymlinks fails for a deleted file; the cleaned path still matches.
	if real, err := filepath.EvalSymlinks(clean); err == nil && real != clean {
		out = append(out, real)
	}
	return out
}

// scan reads every loopN under dir and returns the attached ones whose
// backing file keep accepts (all when keep is nil), sorted by number.
// Devices that disappear or are detached while being read are skipped, not
// reported as errors.
func scan(dir string, keep func(Device) bool) ([]Device, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("loop: list %s: %w", dir, err)
	}
	var devs []Device
	for _, e := range entries {
		n, ok := parseName(e.Name())
		if !ok {
			continue
		}
		d, attached, err := readDevice(dir, n, keep)
		if err != nil {
			return nil, err
		}
		if attached {
			devs = append(devs, d)
		}
	}
	slices.SortFunc(devs, func(a, b Device) int { return a.Number - b.Number })
	return devs, nil
}

// readDevice reads /sys/block/loopN. attached is false (with a nil error)
// when the device does not exist, has no backing file, or keep (when not
// nil) rejects it — checked, on Path, Number, BackingFile and Deleted only,
// before the other attributes are read, which makes Find cheap on hosts
// with many devices. The backing file
// is read before and after the other attributes so that a device detached
// and re-attached mid-read is not reported with a mix of both states.
func readDevice(dir string, n int, keep func(Device) bool) (d Device, attached bool, err error) {
	base := filepath.Join(dir, "loop"+strconv.Itoa(n))
	for range consistentReadAttempts {
		d, raw, err := readDeviceOnce(base, n, keep)
		if gone(err) || errors.Is(err, errSkip) {
			return Device{}, false, nil
		}
		if err != nil {
			return Device{}, false, err
		}
		again, err := readAttr(base, "loop/backing_file")
		if gone(err) {
			return Device{}, false, nil
		}
		if err != nil {
			return Device{}, false, err
		}
		if again == raw {
			return d, true, nil
		}
	}
	return Device{}, false, fmt.Errorf("loop: %s: backing file kept changing while being read", base)
}

// errSkip tells readDevice that keep rejected the device.
var errSkip = errors.New("skip")

func readDeviceOnce(base string, n int, keep func(Device) bool) (d Device, rawBacking string, err error) {
	rawBacking, err = readAttr(base, "loop/backing_file")
	if err != nil {
		return Device{}, "", err
	}
	d = Device{Path: devPath(n), Number: n}
	d.BackingFile, d.Deleted = parseBackingFile(rawBacking)
	if keep != nil && !keep(d) {
		return Device{}, "", errSkip
	}
	if d.ReadOnly, err = readBool(base, "ro"); err != nil {
		return Device{}, "", err
	}
	if d.DirectIO, err = readBool(base, "loop/dio"); err != nil {
		return Device{}, "", err
	}
	// Older kernels have no autoclear attribute: nothing is detaching there.
	if d.Detaching, err = readBool(base, "loop/autoclear"); gone(err) {
		d.Detaching = false
	} else if err != nil {
		return Device{}, "", err
	}
	raw, err := readAttr(base, "size")
	if err != nil {
		return Device{}, "", err
	}
	// sysfs "size" is always in 512-byte sectors, whatever the block size.
	sectors, err := strconv.ParseInt(strings.TrimSpace(raw), 10, 64)
	if err != nil {
		return Device{}, "", fmt.Errorf("loop: %s/size: %w", base, err)
	}
	d.SizeBytes = sectors * 512
	if d.Major, d.Minor, err = readDevNum(base); err != nil {
		return Device{}, "", err
	}
	return d, rawBacking, nil
}

// readDevNum parses base/dev ("7:3\n"). The minor is not always N: with the
// max_part module parameter it is N << part_shift.
func readDevNum(base string) (major, minor uint32, err error) {
	raw, err := readAttr(base, "dev")
	if err != nil {
		return 0, 0, err
	}
	ma, mi, ok := strings.Cut(strings.TrimSpace(raw), ":")
	maj, err1 := strconv.ParseUint(ma, 10, 32)
	mnr, err2 := strconv.ParseUint(mi, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("loop: %s/dev: malformed %q", base, raw)
	}
	return uint32(maj), uint32(mnr), nil
}

// parseBackingFile strips the newline sysfs appends (only one: a file name
// may itself end in a newline) and the " (deleted)" marker.
func parseBackingFile(raw string) (path string, deleted bool) {
	path = strings.TrimSuffix(raw, "\n")
	if strings.HasSuffix(path, deletedSuffix) {
		return strings.TrimSuffix(path, deletedSuffix), true
	}
	return path, false
}

func readBool(base, name string) (bool, error) {
	raw, err := readAttr(base, name)
	if err != nil {
		return false, err
	}
	switch strings.TrimSpace(raw) {
	case "0":
		return false, nil
	case "1":
		return true, nil
	}
	return false, fmt.Errorf("loop: %s/%s: malformed %q", base, name, raw)
}

// readAttr returns the raw content of a sysfs attribute. A sysfs attribute
// is at most a page and is produced whole by the first read, so one read
// into a page-sized buffer suffices; os.ReadFile would also fstat, allocate
// a page per call and read again for EOF. The error wraps the errno so gone
// can recognise a vanished device.
func readAttr(base, name string) (string, error) {
	path := filepath.Join(base, name)
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("loop: open %s: %w", path, err)
	}
	defer syscall.Close(fd)
	var buf [4096]byte
	n, err := syscall.Read(fd, buf[:])
	if err != nil {
		return "", fmt.Errorf("loop: read %s: %w", path, err)
	}
	return string(buf[:n]), nil
}

// gone reports a sysfs read that failed because the device was removed or
// detached under us: ENOENT for removed attributes, ENODEV for a kobject
// being torn down.
func gone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENODEV)
}

// parseName returns N for "loopN" and false for anything else (including
// partitions such as loop0p1).
func parseName(name string) (int, bool) {
	digits, ok := strings.CutPrefix(name, "loop")
	if !ok || digits == "" || strings.TrimLeft(digits, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.Atoi(digits)
	return n, err == nil
}

func devPath(n int) string { return filepath.Join(devDir, "loop"+strconv.Itoa(n)) }

func get(dir, name, path string) (Device, bool, error) {
	n, ok := parseName(filepath.Base(name))
	if !ok {
		return Device{}, false, fmt.Errorf("loop: %q is not a loop device name: %w", name, ErrNotFound)
	}
	return readDevice(dir, n, matcher(path))
}
