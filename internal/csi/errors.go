package csi

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/filevol/filevol/internal/answer"
	"github.com/filevol/filevol/internal/attach"
	"github.com/filevol/filevol/internal/freeze"
	"github.com/filevol/filevol/internal/hostos/cgroup"
	"github.com/filevol/filevol/internal/hostos/extents"
	"github.com/filevol/filevol/internal/hostos/fs"
	"github.com/filevol/filevol/internal/hostos/fscrypt"
	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/hostos/mount"
	"github.com/filevol/filevol/internal/hostos/ofd"
	"github.com/filevol/filevol/internal/keywrap"
	"github.com/filevol/filevol/internal/nodestate"
	"github.com/filevol/filevol/internal/volid"
	"github.com/filevol/filevol/internal/volume"
)

// The codes a handler chooses (validation, state conflicts): a
// answer.CodedError, as a kind of volume chooses them. Everything else is
// mapped by toStatus.
var (
	invalidArgument    = answer.InvalidArgument
	notFound           = answer.NotFound
	failedPrecondition = answer.FailedPrecondition
	alreadyExists      = answer.AlreadyExists
	outOfRange         = answer.OutOfRange
	resourceExhausted  = answer.ResourceExhausted
	aborted            = answer.Aborted
)

// sentinelCodes maps the named errors of the lower layers to gRPC codes.
// Order matters only where one error could wrap two sentinels. Every
// exported Err* of volume, nodestate and internal/hostos/... must be here,
// or be of a class (volume.NewError: the kinds' own errors), with a code
// that tells the CO what to do (never INTERNAL or UNKNOWN): errors_test.go
// finds them in the source and fails on one left out.
var sentinelCodes = []struct {
	err  error
	code codes.Code
}{
	{context.DeadlineExceeded, codes.DeadlineExceeded},
	{context.Canceled, codes.Canceled},
	// A kind's own named errors, by their class (volume.NewError).
	{volume.ClassInvalid, codes.InvalidArgument},
	{volume.ClassPrecondition, codes.FailedPrecondition},
	{volume.ClassExhausted, codes.ResourceExhausted},
	{volume.ClassExists, codes.AlreadyExists},
	{volume.ErrNotFound, codes.NotFound},
	{volume.ErrInvalidID, codes.NotFound},
	// Never answered as such (the fence goes on without credentials), but
	// should a kind return it elsewhere: the Secret is what is missing.
	{volume.ErrNoFenceCredentials, codes.FailedPrecondition},
	// What the pool refuses in a request it was given: a bad name, a
	// capacity or provisioning out of range, thick provisioning on a pool
	// that cannot preallocate, a content source it cannot use.
	{volume.ErrInvalidArgument, codes.InvalidArgument},
	{volume.ErrAlreadyExists, codes.AlreadyExists},
	{volume.ErrNoSpace, codes.ResourceExhausted},
	{volume.ErrSnapshotNotFound, codes.NotFound},
	{volume.ErrGroupNotFound, codes.NotFound},
	// CSI DeleteSnapshot: "Snapshot is part of a group" is INVALID_ARGUMENT:
	// the CO deletes the group instead.
	{volume.ErrInGroup, codes.InvalidArgument},
	{volume.ErrShrink, codes.OutOfRange},
	{volume.ErrImageMissing, codes.FailedPrecondition},
	{loop.ErrNoDevice, codes.ResourceExhausted},
	// No call fails for it today (a snapshot image whose extents cannot
	// be mapped is described whole, or compared by its data); mapped so
	// that one that did would say the pool's filesystem cannot tell.
	{extents.ErrUnsupported, codes.FailedPrecondition},
	// No call fails for it today (limits never fail a publish: qos.go);
	// mapped so that one that did would tell the CO to look at the pod.
	{cgroup.ErrPodNotFound, codes.FailedPrecondition},
	{loop.ErrBusy, codes.FailedPrecondition},
	{loop.ErrNotFound, codes.FailedPrecondition},
	// Fencing: another node's device still holds the image of a volume on a
	// shared pool; it must be detached there (or that node's client cut
	// off from the storage) before this node may attach it.
	{loop.ErrLocked, codes.FailedPrecondition},
	// No call fails for it bare today (loop wraps it in ErrLocked, above;
	// the pool and the attachment records wait for the holder); mapped so
	// that one that did would say, as fencing does, that another holder
	// must let go first.
	{ofd.ErrHeld, codes.FailedPrecondition},
	// Attachments (ControllerPublishVolume): a single-node volume attached
	// elsewhere is FAILED_PRECONDITION and one attached here with other
	// options ALREADY_EXISTS (CSI spec); a node that presents an attachment
	// the record no longer holds must be attached again; an unreadable
	// record needs an operator.
	{attach.ErrAttachedElsewhere, codes.FailedPrecondition},
	{attach.ErrIncompatible, codes.AlreadyExists},
	{attach.ErrNotAttached, codes.FailedPrecondition},
	{attach.ErrCorrupt, codes.FailedPrecondition},
	// Encryption (fscrypt): the pool's filesystem or the volume's cannot
	// encrypt, or the volume's data is under another key than its record
	// names; an operator must look. A key of the wrong size never reaches
	// the kernel: the request that carried it is wrong.
	{fscrypt.ErrNotSupported, codes.FailedPrecondition},
	{fscrypt.ErrOtherPolicy, codes.FailedPrecondition},
	{fscrypt.ErrNotEmpty, codes.FailedPrecondition},
	{fscrypt.ErrKeySize, codes.InvalidArgument},
	{mount.ErrInvalidOption, codes.InvalidArgument},
	{mount.ErrNotMounted, codes.FailedPrecondition},
	// The node's mount namespace is at fs.mount-max: no more volumes can
	// be staged or published here until some are removed.
	{mount.ErrTableFull, codes.ResourceExhausted},
	{fs.ErrUnsupported, codes.InvalidArgument},
	{fs.ErrToolMissing, codes.FailedPrecondition},
	{fs.ErrCapability, codes.FailedPrecondition},
	// The device holds no filesystem of the type its volume records, or
	// another holder keeps it busy: the volume's state, not a retry, must
	// change first.
	{fs.ErrNoSuperblock, codes.FailedPrecondition},
	{fs.ErrInUse, codes.FailedPrecondition},
	// An encrypted volume's Secret that does not open its key: the Secret
	// must change, not the call be retried as it is.
	{keywrap.ErrNoKey, codes.FailedPrecondition},
	{keywrap.ErrWrongKey, codes.FailedPrecondition},
	{keywrap.ErrDamaged, codes.FailedPrecondition},
	// Freeze, thaw or grow of a path that is no mount point: the volume is
	// not staged or published where the request says.
	{fs.ErrNotMountPoint, codes.FailedPrecondition},
	{nodestate.ErrNoSpace, codes.ResourceExhausted},
	// An ID no filevol made names no volume (CSI: NOT_FOUND).
	{volid.ErrInvalid, codes.NotFound},
	// A freeze of the volume for another snapshot or clone runs: retry.
	{freeze.ErrBusy, codes.Aborted},
	// The node that has the volume mounted did not answer: retry later.
	{freeze.ErrNodeUnavailable, codes.Unavailable},
	{freeze.ErrNoSpace, codes.ResourceExhausted},
	// The node could not freeze the filesystem; the message says why.
	{freeze.ErrFailed, codes.FailedPrecondition},
}

// toStatus is the one place an error becomes a gRPC status. No call returns
// UNKNOWN: an error nobody named is INTERNAL, with its message kept.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	var ce *answer.CodedError
	if errors.As(err, &ce) {
		return status.Error(ce.Code, err.Error())
	}
	if s, ok := status.FromError(err); ok && s.Code() != codes.Unknown {
		return err
	}
	for _, m := range sentinelCodes {
		if errors.Is(err, m.err) {
			return status.Error(m.code, err.Error())
		}
	}
	return status.Error(codes.Internal, err.Error())
}
