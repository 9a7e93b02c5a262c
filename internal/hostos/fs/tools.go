package fs

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// blkid(8) exit statuses for low-level probing.
const (
	blkidNothingFound = 2
	blkidAmbivalent   = 8
)

func (t Tools) probe(ctx context.Context, dev string) (string, error) {
	// blkid also exits 2 ("nothing found") when it cannot open the device
	// at all, which would read as "blank, format it"; open it first so a
	// missing or unreadable device is an error instead.
	if err := checkBlockDevice(dev); err != nil {
		return "", err
	}
	// -p reads the device itself, not the blkid cache. No -u: every usage
	// (filesystem, raid, crypto, other such as swap) and, with -p,
	// partition tables are probed, because anything found means "do not
	// format". -s limits the output to the two tags looked at.
	out, err := t.R.Run(ctx, "blkid", "-p", "-s", "TYPE", "-s", "PTTYPE", "-o", "export", dev)
	var exitErr *ExitError
	if errors.As(err, &exitErr) {
		switch exitErr.Code {
		case blkidNothingFound:
			return "", nil
		case blkidAmbivalent:
			// Several signatures: certainly not blank, and not one type
			// that could be mounted either.
			return "", fmt.Errorf("probe %s: more than one signature found: %w", dev, err)
		}
	}
	if err != nil {
		return "", fmt.Errorf("probe %s: %w", dev, err)
	}
	tags := parseExport(out)
	if typ := tags["TYPE"]; typ != "" {
		return typ, nil
	}
	if pt := tags["PTTYPE"]; pt != "" {
		return pt, nil
	}
	// Exit 0 with neither tag should not happen; treat it as "something
	// is there" rather than as blank.
	return "", fmt.Errorf("probe %s: blkid found something but reported no TYPE or PTTYPE", dev)
}

// parseExport parses blkid -o export output: KEY=value lines.
func parseExport(out []byte) map[string]string {
	tags := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			tags[k] = v
		}
	}
	return tags
}

func checkBlockDevice(dev string) error {
	f, err := os.OpenFile(dev, os.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	if st.Mode()&os.ModeDevice == 0 || st.Mode()&os.ModeCharDevice != 0 {
		return fmt.Errorf("probe %s: not a block device", dev)
	}
	return nil
}

// mkfsArgs are the mkfs commands per type. Common reasons:
//
//   - No discard (-E nodiscard, -K): the image is a fresh sparse file that
//     already reads as zeros, and on a thick ("provisioning: thick") image
//     a discard would punch holes and silently make it thin again.
//   - Forced (-F, -f): the caller has probed the device and found nothing;
//     mkfs's own checks would only ask questions nobody can answer.
//
// ext4:
//
//   - lazy_itable_init=1,lazy_journal_init=1: skip writing zeros over the
//     inode tables and the journal. A loop device turns those zeros into
//     allocated (unwritten) extents: 33 MiB of a 1 GiB image and 1-2 ms,
//     for blocks that already read as zero. mke2fs still checks that the
//     inode tables read as zero and only then marks them initialised, so
//     the kernel's lazyinit thread has nothing to do on a fresh image.
//   - -m 0: no root-reserved blocks. The reserve protects system daemons
//     on a shared root filesystem; a volume belongs to one workload, which
//     usually runs as non-root and asked for the whole size.
var mkfsArgs = map[string][]string{
	"ext4": {"mkfs.ext4", "-F", "-q", "-m", "0",
		"-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard"},
	"xfs":   {"mkfs.xfs", "-f", "-q", "-K"},
	"btrfs": {"mkfs.btrfs", "-f", "-q", "-K"},
}

func (t Tools) format(ctx context.Context, dev, fstype string, o FormatOptions) error {
	argv, ok := mkfsArgs[fstype]
	if !ok {
		return fmt.Errorf("format %s: %w: %q", dev, ErrUnsupported, fstype)
	}
	args := append([]string(nil), argv[1:]...)
	if o.Encrypt {
		if fstype != "ext4" {
			return fmt.Errorf("format %s: %w: %s cannot hold encrypted directories (fscrypt); ext4 can", dev, ErrUnsupported, fstype)
		}
		// The feature only lets directories be encrypted (fscrypt); it
		// changes nothing of a directory that is not.
		args = append(args, "-O", "encrypt")
	}
	args = append(args, dev)
	if _, err := t.R.Run(ctx, argv[0], args...); err != nil {
		return fmt.Errorf("format %s as %s: %w", dev, fstype, err)
	}
	return nil
}

func (t Tools) grow(ctx context.Context, dev, mountPoint, fstype string) error {
	var (
		program string
		args    []string
	)
	switch fstype {
	case "ext4":
		// resize2fs finds the mount point itself and resizes online.
		program, args = "resize2fs", []string{dev}
	case "xfs":
		program, args = "xfs_growfs", []string{"-d", mountPoint}
	case "btrfs":
		program, args = "btrfs", []string{"filesystem", "resize", "max", mountPoint}
	default:
		return fmt.Errorf("grow %s: %w: %q", dev, ErrUnsupported, fstype)
	}
	if fstype != "ext4" {
		// xfs_growfs and btrfs act on whatever filesystem holds the path:
		// on an unmounted staging directory that is the node's own root.
		if err := checkMountRoot(mountPoint); err != nil {
			return fmt.Errorf("grow %s: %w", dev, err)
		}
	}
	if _, err := t.R.Run(ctx, program, args...); err != nil {
		if fstype == "ext4" && mountPoint != "" && !hasCapSysResource() {
			// resize2fs only says "Permission denied" (EXT4_IOC_RESIZE_FS
			// returned EPERM), which sends operators looking at files.
			return fmt.Errorf("grow %s at %s: %w: online ext4 resize (EXT4_IOC_RESIZE_FS) needs CAP_SYS_RESOURCE, which this process lacks (add it to the container's capabilities; offline growth works without it): %w",
				dev, mountPoint, ErrCapability, err)
		}
		return fmt.Errorf("grow %s at %s: %w", dev, mountPoint, err)
	}
	return nil
}
