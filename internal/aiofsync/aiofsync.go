// Package aiofsync runs fsync(2) through Linux AIO (IOCB_CMD_FSYNC, Linux
// 4.18+): the kernel performs the fsync on one of its workers and the
// calling goroutine waits in the Go netpoller, on an eventfd, instead of
// holding an OS thread in a blocking syscall.
//
// Why it matters: a goroutine blocked in fsync(2) for longer than ~20 µs
// has its P taken away by the runtime's sysmon (handoffp, startm), and on
// return its thread finds no P and parks (exitsyscall, stopm). With many
// creates in flight, each waiting ~0.3 ms in fsync, that churn of thread
// wake-ups, plus sysmon itself polling every 20 µs while any thread sits in
// a syscall, cost about a fifth of the driver's CPU on the bench VM, where
// every sleep and wake is a VM exit. Submitted through AIO, the wait is a
// parked goroutine: no thread changes hands.
//
// The durability is fsync(2)'s: the kernel calls the same vfs_fsync on the
// same open file, and its error (errseq_t included) comes back unchanged.
// Where AIO is unavailable (an old kernel, a seccomp profile that refuses
// io_setup, aio-max-nr exhausted, a filesystem without fsync for AIO),
// Fsync falls back to fsync(2) on the calling thread, call by call.
//
// What it does not change: the machine's work. The fsync now runs on a
// kernel worker instead of a driver thread, so the driver's own CPU per
// fsync falls while the machine's stays about the same; what goes is the
// runtime's thread churn around the wait.
package aiofsync

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// depth is how many fsyncs one Syncer keeps in flight: a call that finds
// depth calls already under way fsyncs on its own thread rather than
// queue. The driver rarely has more than a few dozen calls in flight, and
// each context takes depth of the machine-wide fs.aio-max-nr (65536 by
// default).
const depth = 64

// iocb and ioEvent are struct iocb and struct io_event of
// <linux/aio_abi.h> on little-endian machines (aio_key before
// aio_rw_flags); New refuses big-endian ones.
type iocb struct {
	data      uint64
	key       uint32
	rwFlags   int32
	opcode    uint16
	reqprio   int16
	fildes    uint32
	buf       uint64
	nbytes    uint64
	offset    int64
	reserved2 uint64
	flags     uint32
	resfd     uint32
}

type ioEvent struct {
	data uint64
	obj  uint64
	res  int64
	res2 int64
}

const (
	iocbCmdFsync  = 2
	iocbFlagResfd = 1 << 0
)

// Syncer submits fsyncs to one AIO context. Use New; the zero value is not
// usable. A nil *Syncer is valid and fsyncs on the calling thread.
type Syncer struct {
	ctx uintptr  // aio_context_t
	efd int      // eventfd the kernel signals on each completion
	ev  *os.File // efd, registered with the netpoller

	mu      sync.Mutex
	nextID  uint64
	waiting map[uint64]*request

	reaped chan struct{} // closed when the reaper has exited

	// inFlight counts the Fsync calls under way, whichever way they go.
	// A call submits only if it found fewer than depth, so at most depth
	// requests are ever in the context.
	inFlight atomic.Int32
	// aloneDirect sends an fsync that no other overlaps straight to the
	// kernel (tests clear it to exercise AIO one call at a time).
	aloneDirect bool

	// submitted and direct count the fsyncs done each way (for tests).
	submitted, direct atomic.Uint64
}

// process is the Syncer Fsync uses, set up on first use: one AIO context
// and one reaper goroutine for the whole process, for its lifetime.
var process = sync.OnceValue(func() *Syncer {
	s, err := New()
	if err != nil {
		return nil // fsync(2) on the calling thread, always
	}
	return s
})

// Fsync is fsync(2) of fd through the process's Syncer; fsync(2) on the
// calling thread where AIO is not available.
func Fsync(fd int) error { return process().Fsync(fd) }

// request is one fsync in flight. The iocb lives here, on the heap, so the
// kernel reads stable memory during io_submit.
type request struct {
	cb   iocb
	done chan error
}

// New sets up an AIO context and its completion reaper. An error means AIO
// is not available here; callers use a nil *Syncer then.
func New() (*Syncer, error) {
	if !littleEndian() {
		return nil, errors.New("aiofsync: struct iocb layout is only defined here for little-endian machines")
	}
	var ctx uintptr
	if _, _, e := unix.Syscall(unix.SYS_IO_SETUP, depth, uintptr(unsafe.Pointer(&ctx)), 0); e != 0 {
		return nil, fmt.Errorf("aiofsync: io_setup: %w", e)
	}
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		_, _, _ = unix.Syscall(unix.SYS_IO_DESTROY, ctx, 0, 0)
		return nil, fmt.Errorf("aiofsync: eventfd: %w", err)
	}
	s := &Syncer{
		ctx:     ctx,
		efd:     efd,
		ev:      os.NewFile(uintptr(efd), "aiofsync-eventfd"), // non-blocking: the netpoller waits on it
		waiting: make(map[uint64]*request),
		reaped:  make(chan struct{}),

		aloneDirect: true,
	}
	go s.reap()
	return s, nil
}

func littleEndian() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}

// Fsync is fsync(2) of fd. The caller keeps fd open until it returns.
//
// An fsync that no other overlaps is made on the calling thread: with
// nothing else waiting to run, the runtime leaves that thread its P, and
// the AIO round trip (kernel worker, eventfd, reaper goroutine) would only
// add latency to a lone create. The churn AIO avoids comes with
// concurrency, and so does its use.
func (s *Syncer) Fsync(fd int) error {
	if s == nil {
		return fsyncHere(fd)
	}
	defer s.inFlight.Add(-1)
	if n := s.inFlight.Add(1); n > depth || n == 1 && s.aloneDirect {
		return s.fsyncHere(fd)
	}

	r := &request{done: make(chan error, 1)}
	r.cb = iocb{opcode: iocbCmdFsync, fildes: uint32(fd), flags: iocbFlagResfd, resfd: uint32(s.efd)}
	s.mu.Lock()
	s.nextID++
	id := s.nextID
	r.cb.data = id
	s.waiting[id] = r
	s.mu.Unlock()

	cbs := [1]*iocb{&r.cb}
	n, _, e := unix.Syscall(unix.SYS_IO_SUBMIT, s.ctx, 1, uintptr(unsafe.Pointer(&cbs[0])))
	if e != 0 || n != 1 {
		s.mu.Lock()
		delete(s.waiting, id)
		s.mu.Unlock()
		// EINVAL: this file has no AIO fsync; EAGAIN: the kernel is
		// short of resources; EBADF: fd is not open, which fsync(2)
		// reports as well. None is the fsync's own failure.
		return s.fsyncHere(fd)
	}
	s.submitted.Add(1)
	return <-r.done
}

func (s *Syncer) fsyncHere(fd int) error {
	s.direct.Add(1)
	return fsyncHere(fd)
}

// reap delivers completions: it waits on the eventfd in the netpoller and
// collects every event the ring holds.
func (s *Syncer) reap() {
	defer close(s.reaped)
	var count [8]byte
	events := make([]ioEvent, depth)
	var zero unix.Timespec
	for {
		if _, err := s.ev.Read(count[:]); err != nil {
			return // closed
		}
		for {
			n, _, e := unix.Syscall6(unix.SYS_IO_GETEVENTS, s.ctx, 0, uintptr(len(events)),
				uintptr(unsafe.Pointer(&events[0])), uintptr(unsafe.Pointer(&zero)), 0)
			if e == unix.EINTR {
				continue
			}
			if e != 0 || n == 0 {
				break
			}
			for _, ev := range events[:n] {
				s.mu.Lock()
				r := s.waiting[ev.data]
				delete(s.waiting, ev.data)
				s.mu.Unlock()
				if r == nil {
					continue
				}
				r.done <- result(ev.res)
			}
			if int(n) < len(events) {
				break
			}
		}
	}
}

// Close releases the context and stops the reaper. Call it once every
// Fsync has returned, and call none after. (The process's Syncer is never
// closed; the kernel releases it at exit.)
func (s *Syncer) Close() error {
	if s == nil {
		return nil
	}
	_, _, e := unix.Syscall(unix.SYS_IO_DESTROY, s.ctx, 0, 0)
	cerr := s.ev.Close()
	<-s.reaped
	if e != 0 {
		return fmt.Errorf("aiofsync: io_destroy: %w", e)
	}
	return cerr
}

// result is the error an io_event's res stands for: a negative errno, as
// the syscall would have returned it.
func result(res int64) error {
	if res < 0 {
		return unix.Errno(-res)
	}
	return nil
}

// fsyncHere is fsync(2) on the calling thread.
func fsyncHere(fd int) error {
	for {
		if err := unix.Fsync(fd); err != unix.EINTR {
			return err
		}
	}
}
