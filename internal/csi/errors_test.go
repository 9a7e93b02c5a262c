package csi

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/filevol/filevol/internal/hostos/fs"
	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/hostos/mount"
	"github.com/filevol/filevol/internal/pool"
)

func TestToStatus(t *testing.T) {
	wrap := func(e error) error { return fmt.Errorf("stage vol-1: attach /pool/x.img: %w", e) }
	cases := []struct {
		err  error
		code codes.Code
	}{
		{nil, codes.OK},
		{invalidArgument("bad %s", "x"), codes.InvalidArgument},
		{wrap(pool.ErrNotFound), codes.NotFound},
		{wrap(pool.ErrInvalidID), codes.NotFound},
		{wrap(pool.ErrAlreadyExists), codes.AlreadyExists},
		{wrap(pool.ErrNoSpace), codes.ResourceExhausted},
		{wrap(loop.ErrNoDevice), codes.ResourceExhausted},
		{wrap(loop.ErrBusy), codes.FailedPrecondition},
		{wrap(mount.ErrInvalidOption), codes.InvalidArgument},
		{wrap(fs.ErrToolMissing), codes.FailedPrecondition},
		{wrap(context.DeadlineExceeded), codes.DeadlineExceeded},
		{wrap(context.Canceled), codes.Canceled},
		{errors.New("something nobody named"), codes.Internal},
		{status.Error(codes.Unknown, "unknown from below"), codes.Internal},
		{status.Error(codes.Unavailable, "kept"), codes.Unavailable},
		{fmt.Errorf("wrapped coded: %w", aborted("busy")), codes.Aborted},
	}
	for _, c := range cases {
		got := toStatus(c.err)
		if status.Code(got) != c.code {
			t.Errorf("toStatus(%v) = %v, want %v", c.err, status.Code(got), c.code)
		}
		if c.err != nil && status.Convert(got).Message() == "" {
			t.Errorf("toStatus(%v) lost the message", c.err)
		}
	}
	// The message keeps the context the handler added.
	msg := status.Convert(toStatus(wrap(pool.ErrNotFound))).Message()
	if msg != "stage vol-1: attach /pool/x.img: volume not found" {
		t.Errorf("message %q", msg)
	}
}

func TestInflight(t *testing.T) {
	f := newInflight()
	unlockA, err := f.tryLock("a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.tryLock("a"); status.Code(toStatus(err)) != codes.Aborted {
		t.Fatalf("second lock of a: %v, want ABORTED", err)
	}
	// All-or-nothing: b must stay free when a is busy.
	if _, err := f.tryLock("b", "a"); err == nil {
		t.Fatal("locked b+a while a was busy")
	}
	unlockB, err := f.tryLock("b")
	if err != nil {
		t.Fatalf("b not released after failed multi-lock: %v", err)
	}
	unlockA()
	unlockB()
	if _, err := f.tryLock("a", "b"); err != nil {
		t.Fatalf("a+b after release: %v", err)
	}
}
