package pool

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/durable"
	"github.com/filevol/filevol/internal/volume"
)

// create follows the order the package doc fixes: image (none for a thin
// blank volume) and record (the record fsynced, the image too unless
// blank) → record renamed into place (the commit point) → image renamed
// into place → one directory fsync that makes both durable, shared with
// the operations that wait for one at the same time (durable.DirSync).
// Until the commit point a crash leaves only temporary files, which Open
// removes; after it, a record whose .tmp image Open renames into place.
func (p *Pool) create(ctx context.Context, req volume.CreateRequest) (volume.Volume, error) {
	v, err := p.newVolume(req)
	if err != nil {
		return volume.Volume{}, err
	}
	if err := ctx.Err(); err != nil {
		return volume.Volume{}, err
	}
	src, enc, err := p.sourceImage(req.Source, v.CapacityBytes)
	if err != nil {
		return volume.Volume{}, err
	}
	if req.Source != nil {
		if err := sourceEncryption(req.Source, enc, req.Encryption); err != nil {
			return volume.Volume{}, err
		}
		// The same data, so the same key under the same name (keywrap:
		// the name is what the wrap is bound to): no Secret is needed.
		v.Encryption = cloneEncryption(enc)
	}
	if err := p.checkRoom(v.CapacityBytes, v.Provisioning == volume.ProvisioningThick); err != nil {
		return volume.Volume{}, err
	}
	// A blank volume is pending (pending.go): its image is not fsynced,
	// since the record alone can make it again. A thin one is not even
	// made here: it is nothing but a size, made at the volume's first use.
	// A thick one is made, as a .tmp, so that a pool without the room
	// refuses it before anything is committed. A clone holds data: it is
	// copied and fsynced in a goroutine of its own while this one writes
	// the record, so the two fsyncs overlap instead of adding up. Every
	// way, what the volume holds is durable at the commit point.
	v.ImagePending = src == ""
	lazy := src == "" && v.Provisioning == volume.ProvisioningThin
	tmpImg := p.tmpImagePath(v.ID)
	imageDone := make(chan error, 1)
	switch {
	case lazy:
		imageDone <- nil
	case src == "":
		imageDone <- makeBlankImage(tmpImg, v)
	default:
		go func() { imageDone <- makeClonedImage(ctx, src, tmpImg, v) }()
	}
	draft, err := p.vols.Prepare(v)
	ierr := <-imageDone
	abort := func(err error) (volume.Volume, error) {
		if draft != nil {
			draft.Abandon()
		}
		_ = unix.Unlink(tmpImg)
		return volume.Volume{}, err
	}
	switch {
	case ierr != nil:
		return abort(fmt.Errorf("create volume %s: %w", v.ID, ierr))
	case err != nil:
		return abort(fmt.Errorf("create volume %s: %w", v.ID, wrapNoSpace(err)))
	}
	// Past the slow part (a thick fallocate, a copy): a client that gave up
	// gets nothing half-made.
	if err := ctx.Err(); err != nil {
		return abort(err)
	}
	if err := draft.Commit(); err != nil {
		if errors.Is(err, volume.ErrAlreadyExists) {
			return abort(fmt.Errorf("%w (name %s)", err, quoteShort(v.Name)))
		}
		return abort(fmt.Errorf("create volume %s: %w", v.ID, wrapNoSpace(err)))
	}

	// Committed. An error from here on undoes the commit rather than return
	// an error for a volume that exists: the CO retries and must not find a
	// volume it was told failed, half durable.
	if lazy {
		// A file at <id>.img would be taken for this volume's image at its
		// first use. Only now, with the record ours, is any such file
		// known to be without a record (a duplicate create must not touch
		// the image of the volume it duplicates). Open quarantines them,
		// but if one appeared since, it may hold data.
		err = p.quarantineStrayImage(v.ID)
	} else {
		err = p.publishImage(p.vdir, tmpImg, v.ID)
	}
	if err != nil {
		// <id>.img is not ours (neither way replaces one): leave it.
		return abort(fmt.Errorf("create volume %s: %w", v.ID, wrapNoSpace(err)))
	}
	// Shared with the creates and deletes that wait at the same time.
	if err := draft.Durable(); err != nil {
		// In delete's order, without its fsync: the directory cannot be
		// made durable anyway.
		_ = unix.Rename(p.imagePath(v.ID), tmpImg)
		return abort(fmt.Errorf("create volume %s: %w", v.ID, err))
	}
	return v, nil
}

// provisioningOr checks a provisioning mode asked for: dflt when none
// was, ErrInvalidArgument when it is neither thin nor thick.
func provisioningOr(asked, dflt string) (string, error) {
	switch asked {
	case "":
		return dflt, nil
	case volume.ProvisioningThin, volume.ProvisioningThick:
		return asked, nil
	}
	return "", fmt.Errorf("%w: provisioning %s, want %q or %q",
		volume.ErrInvalidArgument, quoteShort(asked), volume.ProvisioningThin, volume.ProvisioningThick)
}

// newVolume validates req and builds the record it will write.
func (p *Pool) newVolume(req volume.CreateRequest) (volume.Volume, error) {
	if err := validName(req.Name); err != nil {
		return volume.Volume{}, err
	}
	if req.CapacityBytes <= 0 {
		return volume.Volume{}, fmt.Errorf("%w: capacity %d bytes, must be positive", volume.ErrInvalidArgument, req.CapacityBytes)
	}
	prov, err := provisioningOr(req.Provisioning, volume.ProvisioningThin)
	if err != nil {
		return volume.Volume{}, err
	}
	if err := checkEncryption(req.Encryption); err != nil {
		return volume.Volume{}, err
	}
	var enc *volume.Encryption
	if req.Encryption != "" {
		enc = &volume.Encryption{Scheme: req.Encryption}
	}
	var params map[string]string
	if len(req.Parameters) > 0 {
		// A copy: the record must not change if the caller reuses its map.
		params = maps.Clone(req.Parameters)
	}
	return volume.Volume{
		Version:        recordVersion,
		ID:             p.VolumeID(req.Name),
		Name:           req.Name,
		CapacityBytes:  req.CapacityBytes,
		RequestedBytes: requestedBytes(req.RequestedBytes, req.CapacityBytes),
		FSType:         req.FSType,
		Provisioning:   prov,
		Parameters:     params,
		Node:           p.opts.NodeID,
		ContentSource:  cloneSource(req.Source),
		QoS:            normalQoS(req.QoS),
		Encryption:     enc,
		// UTC strips the monotonic reading, so the Volume returned equals
		// the one Get decodes.
		CreatedAt: time.Now().UTC(),
	}, nil
}

// requestedBytes is what a record keeps of the CO's request: nothing when
// it is the capacity itself (the common case keeps records short).
func requestedBytes(requested, capacity int64) int64 {
	if requested <= 0 || requested >= capacity {
		return 0
	}
	return requested
}

// checkRoom refuses a volume that could never be filled. Thin volumes may
// together promise more than the pool holds (overcommit is the point of
// thin), so only the single volume is compared. A thick volume must also
// leave what earlier thick volumes were promised but do not hold yet
// (Capacity.UnbackedBytes); thin creates skip that scan, which keeps the
// hot path free of per-volume work.
func (p *Pool) checkRoom(size int64, thick bool) error {
	free, _, err := p.statfs()
	if err != nil {
		return err
	}
	var unbacked int64
	if thick {
		unbacked = p.unbackedBytes()
	}
	avail := max(0, free-p.opts.ReservedBytes-unbacked)
	if size > avail {
		return fmt.Errorf("%w: requested %d bytes, %d available (%d free, %d reserved, %d promised to thick volumes)",
			volume.ErrNoSpace, size, avail, free, p.opts.ReservedBytes, unbacked)
	}
	return nil
}

// quarantineStrayImage moves a file found at <id>.img to quarantine. One
// stat(2) when there is none, the usual case.
func (p *Pool) quarantineStrayImage(id string) error {
	var st unix.Stat_t
	err := unix.Lstat(p.imagePath(id), &st)
	switch {
	case err == unix.ENOENT:
		return nil
	case err != nil:
		return &os.PathError{Op: "stat", Path: p.imagePath(id), Err: err}
	}
	return p.quarantine(id + imgSuffix)
}

// makeBlankImage makes the temporary, blank image of v at path, not
// fsynced (pending.go). On error nothing is left at path.
func makeBlankImage(path string, v volume.Volume) error {
	fd, err := makeImage(path, v.CapacityBytes, v.Provisioning == volume.ProvisioningThick)
	if err != nil {
		return err
	}
	if err := unix.Close(fd); err != nil {
		_ = unix.Unlink(path)
		return &os.PathError{Op: "close", Path: path, Err: err}
	}
	return nil
}

// makeClonedImage copies src into the temporary image of v at path, grown
// to v's size, and fsyncs it. On error nothing is left at path.
func makeClonedImage(ctx context.Context, src, path string, v volume.Volume) error {
	fd, _, err := cloneImage(ctx, src, path, v.CapacityBytes, v.Provisioning == volume.ProvisioningThick)
	if err != nil {
		return err
	}
	if err = durable.Fsync(fd); err != nil {
		err = wrapNoSpace(&os.PathError{Op: "sync", Path: path, Err: err})
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err != nil {
		_ = unix.Unlink(path)
	}
	return err
}

// makeImage creates the image file at path (mode 0600) with size bytes,
// sparse or fully allocated, and returns it open; the caller fsyncs it
// before the commit point and closes it. On error nothing is left behind.
func makeImage(path string, size int64, thick bool) (int, error) {
	fd, err := durable.CreateExcl(path)
	if err != nil {
		return -1, wrapNoSpace(err)
	}
	err = sizeImage(fd, 0, size, thick)
	if err != nil {
		_ = unix.Close(fd)
		_ = unix.Unlink(path)
		return -1, wrapNoSpace(fmt.Errorf("size image %s to %d bytes: %w", path, size, err))
	}
	return fd, nil
}

// publishImage renames the temporary image tmp in dir (volumes/ or
// snapshots/) to <id>.img, never over an existing file: an image without a
// record should not exist (Open quarantines them), but if one does it may
// hold data, so it is moved to quarantine rather than overwritten.
func (p *Pool) publishImage(dir, tmp, id string) error {
	img := imagePath(dir, id)
	err := durable.RenameNoReplace(tmp, img)
	if errors.Is(err, unix.EEXIST) {
		if err = p.quarantineFrom(dir, id+imgSuffix); err == nil {
			err = durable.RenameNoReplace(tmp, img)
		}
	}
	return err
}
