package gluster_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	attachment "github.com/filevol/filevol/internal/attach"
	"github.com/filevol/filevol/internal/testutil/gluster"
)

// Two controller replicas on two GlusterFS clients attach, detach and
// delete one volume ID over and over (a hand-over where both still
// work): every call returns, none fails. When each volume's lock was a
// file that the delete unlinked and the next attach made again, a lock
// request racing that unlink and create could hang for good
// (TestLockOnAFileUnlinkedAndMadeAgainHangs meets it in about a second
// with bare calls; these calls, with their record writes between, did not
// meet it in 15 s with the old locks either: this test guards the
// locks' behaviour across clients, the bare test the reason for them).
// The volume and clients are
// configured as a shared pool requires (no metadata caching: with it, a
// record the other replica had just replaced read ESTALE here).
func TestAttachmentLocksNeverHangOnGlusterFS(t *testing.T) {
	mnts := sharedPoolClients(t)
	stores := []*attachment.Store{attachment.New(mnts[0]), attachment.New(mnts[1])}
	run := 15 * time.Second
	if long() {
		run = 2 * time.Minute
	}
	const vol = "fv1-img-3f9a0c2e-0123456789abcdef0123456789abcdef"
	type replica struct {
		rounds, last atomic.Int64 // rounds done; when the last ended (UnixNano)
		done         atomic.Bool
		err          error
	}
	replicas := make([]*replica, len(stores))
	for i, s := range stores {
		r := &replica{}
		r.last.Store(time.Now().UnixNano())
		replicas[i] = r
		node := fmt.Sprintf("node-%d", i)
		go func() {
			defer r.done.Store(true)
			for end := time.Now().Add(run); time.Now().Before(end); {
				_, err := s.Attach(attachment.Request{VolumeID: vol, Node: node}, nil)
				if err == nil {
					err = s.Detach(vol, node)
				}
				if err == nil {
					err = s.Retire(vol, func(attachment.Record) error { return nil })
				}
				if err != nil && !errors.Is(err, attachment.ErrAttachedElsewhere) {
					r.err = err
					return
				}
				r.rounds.Add(1)
				r.last.Store(time.Now().UnixNano())
			}
		}()
	}
	// A round takes milliseconds: a replica 30 s without one hangs.
	for {
		time.Sleep(time.Second)
		all := true
		for i, r := range replicas {
			if r.done.Load() {
				continue
			}
			all = false
			if idle := time.Since(time.Unix(0, r.last.Load())); idle > 30*time.Second {
				t.Fatalf("replica %d has not finished a round of attach, detach and delete in %s (after %d rounds): a lock request hangs (the FUSE clients are killed at teardown)",
					i, idle.Round(time.Second), r.rounds.Load())
			}
		}
		if all {
			break
		}
	}
	for i, r := range replicas {
		if r.err != nil {
			t.Errorf("replica %d after %d rounds: %v", i, r.rounds.Load(), r.err)
		}
		t.Logf("replica %d: %d rounds of attach, detach and delete in %s", i, r.rounds.Load(), run)
	}
}

// The GlusterFS behaviour behind the attachment locks' design (long
// experiment): client A makes a lock file, locks it, unlinks it and
// closes it, in a loop; client B opens the same name (O_CREAT) and locks
// it, in a loop. Observed on GlusterFS 10.3: within seconds one of B's
// lock requests never returns (D state in the FUSE client's
// request_wait_answer); killing the client at teardown ends it. The test
// passes when that is seen, and fails, saying GlusterFS changed, when two
// minutes go by without it.
func TestLockOnAFileUnlinkedAndMadeAgainHangs(t *testing.T) {
	requireLong(t)
	g := gluster.Start(t)
	a, b := g.MountNode(t, "node-a"), g.MountNode(t, "node-b")
	name := "vol.lock"
	cycle := func(dir string, unlink bool) error {
		path := filepath.Join(dir, name)
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if errors.Is(err, fs.ErrExist) || errors.Is(err, fs.ErrNotExist) {
			return nil // the other client's create or unlink: again
		}
		if err != nil {
			return err
		}
		defer f.Close()
		lk := unix.Flock_t{Type: unix.F_WRLCK}
		if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLKW, &lk); errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESTALE) {
			return nil // the file was unlinked: GlusterFS says so, at best
		} else if err != nil {
			return err
		}
		if unlink {
			if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
		return nil
	}
	var last [2]atomic.Int64
	var failed atomic.Bool
	stop := make(chan struct{})
	defer close(stop)
	for i, dir := range []string{a, b} {
		last[i].Store(time.Now().UnixNano())
		go func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := cycle(dir, i == 0); err != nil {
					select {
					case <-stop: // the hung request, ended by the client's kill
					default:
						failed.Store(true)
						t.Errorf("client %d: %v", i, err)
					}
					return
				}
				last[i].Store(time.Now().UnixNano())
			}
		}()
	}
	for start := time.Now(); time.Since(start) < 2*time.Minute && !failed.Load(); time.Sleep(time.Second) {
		for i := range last {
			if idle := time.Since(time.Unix(0, last[i].Load())); idle > 10*time.Second {
				t.Logf("client %d's lock request has not returned for %s, %s after the start: the hang", i, idle.Round(time.Second), time.Since(start).Round(time.Second))
				return
			}
		}
	}
	if !failed.Load() {
		t.Errorf("2 minutes without a hang: GlusterFS changed; docs/shared-pools-glusterfs.md says otherwise")
	}
}
