// Package reading is one look at the kernel shared by many answers: a
// pass over the loop devices and the mount table, both indexed, from
// which the questions about every volume of a node (health, stats, the
// pods using a volume) are answered without scanning either again. The
// services make one for a pass over all volumes (With); the image kind's
// node half answers from the one its context carries, or shares one with
// the answers asked at the same time (Shared).
package reading

import (
	"context"
	"fmt"
	"sync"

	"github.com/filevol/filevol/internal/hostos"
	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/hostos/mount"
	"github.com/filevol/filevol/internal/volview"
)

// Reading is one look at the kernel: a pass over the loop devices and the
// mount table, both indexed, from which many questions are answered
// without scanning either again. With 1,000 volumes on a node, scanning
// every loop device and parsing the 2,000-line mount table once per
// volume made the answers that cover every volume cost the square.
//
// A reading is made for one request (or one sweep) and dropped with it.
// The devices it returns are re-read when they are returned (loop.Index);
// the mount table is as of the reading.
type Reading struct {
	loops  hostos.LoopIndex
	mounts *volview.TableIndex
}

// Read reads the loop devices, then the mount table: the order of a
// per-volume look-up (ImageUsage), so that a device attached in between
// is missed by both and its mounts are not mistaken for another's.
func Read(h hostos.Host) (*Reading, error) {
	ix, err := h.Loops.Index()
	if err != nil {
		return nil, fmt.Errorf("look up loop devices: %w", err)
	}
	table, err := h.Mounts.Table()
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	return &Reading{loops: ix, mounts: volview.IndexTable(table)}, nil
}

// New is a reading of the devices loops finds and of the mounts table
// holds (a part of the table, for an answer about given paths).
func New(loops hostos.LoopIndex, table mount.Table) *Reading {
	return &Reading{loops: loops, mounts: volview.IndexTable(table)}
}

// Usage is where the image at imagePath is in use, answered from the
// reading.
func (r *Reading) Usage(imagePath string) (volview.Usage, error) {
	devs, err := r.Devices(imagePath)
	if err != nil {
		return volview.Usage{}, fmt.Errorf("look up loop devices of %s: %w", imagePath, err)
	}
	return r.mounts.Of(devs), nil
}

// Table is the mount table of the reading.
func (r *Reading) Table() mount.Table { return r.mounts.Table() }

// Shared gives the read-only answers (volume health and stats)
// a reading they share with the answers asked at the same time: kubelet
// asks for every volume's health and stats in a burst, and after a restart
// 1,000 asks came in at once, each scanning everything.
//
// A caller never gets a reading that began before it arrived: a reading
// under way when a caller arrives may already have passed what that
// caller's own look-up would see, so it waits for the next one, which
// starts as soon as the one under way ends and serves everyone who arrived
// meanwhile. Every answer is therefore made from a reading taken after its
// request came, as its own would have been: nothing is served from an
// earlier moment, and nothing decides a detach, a delete or a quarantine
// from it (those read the kernel themselves, under the volume's lock).
type Shared struct {
	host    hostos.Host
	mu      sync.Mutex
	running bool
	next    *readingFlight // the reading that starts when the one running ends
}

type readingFlight struct {
	done chan struct{}
	r    *Reading
	err  error
	// waiters counts the callers queued for it (under Shared.mu),
	// which is what a test waits on to know they all arrived first.
	waiters int
}

// NewShared shares readings of h.
func NewShared(h hostos.Host) *Shared { return &Shared{host: h} }

// Get returns a reading begun after the call, shared with the callers
// that arrived while the last one was under way.
func (s *Shared) Get(ctx context.Context) (*Reading, error) {
	f := &readingFlight{done: make(chan struct{})}
	s.mu.Lock()
	if s.running {
		if s.next == nil {
			s.next = f
		}
		f = s.next
		f.waiters++
		s.mu.Unlock()
	} else {
		s.running = true
		s.mu.Unlock()
		s.run(f)
	}
	select {
	case <-f.done:
		return f.r, f.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// run makes f's reading, then starts the one its waiters queued, if any,
// on a goroutine of its own so that this caller answers now.
func (s *Shared) run(f *readingFlight) {
	f.r, f.err = Read(s.host)
	close(f.done)
	s.mu.Lock()
	next := s.next
	s.next = nil
	s.running = next != nil
	s.mu.Unlock()
	if next != nil {
		go s.run(next)
	}
}

type key struct{}

// With returns ctx carrying r: the answers asked with it are made from r.
// A reading is as fresh as the request it was made for: use the context
// for that request (or that pass) only.
func With(ctx context.Context, r *Reading) context.Context {
	return context.WithValue(ctx, key{}, r)
}

// From returns the reading ctx carries, if any.
func From(ctx context.Context) (*Reading, bool) {
	r, ok := ctx.Value(key{}).(*Reading)
	return r, ok
}

// listedLoops finds devices in a listing, by the backing path as loop.Find
// compares it (loop.Backing).
type listedLoops []loop.Device

func (l listedLoops) Find(path string) ([]loop.Device, error) { return loop.Backing(l, path), nil }

// Devices are the loop devices of the image at imagePath, as of the
// reading (each re-read as it is returned, for a whole reading).
func (r *Reading) Devices(imagePath string) ([]loop.Device, error) { return r.loops.Find(imagePath) }

// WithListed returns ctx carrying a reading made of devs and table: a
// listing of the loop devices (hostos.Loops.List, which names a device
// attached from another mount namespace by its path under the pool) and
// the mount table, which a caller that asks about every volume in one go
// (the node view of /debug/volumes) has just read for itself. Its health
// questions are then answered from what it reports, instead of a reading
// of every loop device and the whole table per volume.
func WithListed(ctx context.Context, devs []loop.Device, table mount.Table) context.Context {
	return With(ctx, New(listedLoops(devs), table))
}
