package attach

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

const vol = "fv1-img-3f9a0c2e-0123456789abcdef0123456789abcdef"

func TestAttachIsIdempotentAndDurable(t *testing.T) {
	dir := t.TempDir()
	s := New(dir)
	a, err := s.Attach(Request{VolumeID: vol, Node: "node-a", SingleNode: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.Epoch != 1 || a.Node != "node-a" {
		t.Fatalf("first attach = %+v, want node-a under epoch 1", a)
	}
	again, err := New(dir).Attach(Request{VolumeID: vol, Node: "node-a", SingleNode: true}, nil)
	if err != nil || again != a {
		t.Fatalf("repeated attach (another store on the same pool) = %+v, %v; want %+v", again, err, a)
	}
	r, err := New(dir).Of(vol)
	if err != nil || len(r.Attachments) != 1 || r.LastEpoch != 1 {
		t.Fatalf("record = %+v, %v", r, err)
	}
}

func TestSingleNodeVolumeRefusesASecondNode(t *testing.T) {
	s := New(t.TempDir())
	if _, err := s.Attach(Request{VolumeID: vol, Node: "node-a", SingleNode: true}, nil); err != nil {
		t.Fatal(err)
	}
	_, err := s.Attach(Request{VolumeID: vol, Node: "node-b", SingleNode: true}, nil)
	var e *ElsewhereError
	if !errors.Is(err, ErrAttachedElsewhere) || !errors.As(err, &e) || e.Node != "node-a" {
		t.Fatalf("second node's attach = %v, want ErrAttachedElsewhere naming node-a", err)
	}
	if !strings.Contains(err.Error(), "node-a") {
		t.Fatalf("message %q does not name the node that holds it", err)
	}
	// A multi-node attach of a volume a node holds alone is refused too.
	if _, err := s.Attach(Request{VolumeID: vol, Node: "node-c", ReadOnly: true}, nil); !errors.Is(err, ErrAttachedElsewhere) {
		t.Fatalf("multi-node attach beside a single-node one = %v", err)
	}
}

func TestIncompatibleReattachIsRefused(t *testing.T) {
	s := New(t.TempDir())
	if _, err := s.Attach(Request{VolumeID: vol, Node: "node-a", SingleNode: true}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Attach(Request{VolumeID: vol, Node: "node-a", SingleNode: true, ReadOnly: true}, nil); !errors.Is(err, ErrIncompatible) {
		t.Fatalf("read-only attach over a read-write one = %v, want ErrIncompatible", err)
	}
}

func TestMultiNodeReaders(t *testing.T) {
	s := New(t.TempDir())
	for i, n := range []string{"node-a", "node-b", "node-c"} {
		a, err := s.Attach(Request{VolumeID: vol, Node: n, ReadOnly: true}, nil)
		if err != nil || a.Epoch != uint64(i+1) {
			t.Fatalf("attach %s = %+v, %v", n, a, err)
		}
	}
	if _, err := s.Attach(Request{VolumeID: vol, Node: "node-d", SingleNode: true}, nil); !errors.Is(err, ErrAttachedElsewhere) {
		t.Fatalf("single-node attach beside readers = %v", err)
	}
	r, _ := s.Of(vol)
	if got := strings.Join(r.Nodes(), ","); got != "node-a,node-b,node-c" {
		t.Fatalf("nodes = %s", got)
	}
}

// TestEpochsAreNeverReused: a node detached (force-detach) and attached
// again gets a new epoch, so its old publish_context fails Check.
func TestEpochsAreNeverReused(t *testing.T) {
	s := New(t.TempDir())
	old, err := s.Attach(Request{VolumeID: vol, Node: "node-a", SingleNode: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Check(vol, "node-a", old.Epoch); err != nil {
		t.Fatalf("check of the live attachment: %v", err)
	}
	if err := s.Detach(vol, "node-a"); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(vol, "node-a", old.Epoch); !errors.Is(err, ErrNotAttached) {
		t.Fatalf("check after detach = %v, want ErrNotAttached", err)
	}
	if _, err := s.Attach(Request{VolumeID: vol, Node: "node-b", SingleNode: true}, nil); err != nil {
		t.Fatalf("attach elsewhere after the detach: %v", err)
	}
	if err := s.Detach(vol, "node-b"); err != nil {
		t.Fatal(err)
	}
	back, err := s.Attach(Request{VolumeID: vol, Node: "node-a", SingleNode: true}, nil)
	if err != nil || back.Epoch <= old.Epoch+1 {
		t.Fatalf("reattach = %+v, %v; want an epoch after %d", back, err, old.Epoch+1)
	}
	if err := s.Check(vol, "node-a", old.Epoch); !errors.Is(err, ErrNotAttached) {
		t.Fatalf("old epoch after reattach = %v, want ErrNotAttached", err)
	}
	r, _ := s.Of(vol)
	if r.LastDetach == nil || r.LastDetach.Node != "node-b" {
		t.Fatalf("last detach = %+v, want node-b", r.LastDetach)
	}
}

func TestDetachAndForgetAreIdempotent(t *testing.T) {
	s := New(t.TempDir())
	for range 2 {
		if err := s.Detach(vol, "never-attached"); err != nil {
			t.Fatal(err)
		}
		if err := s.Forget(vol); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Attach(Request{VolumeID: vol, Node: "node-a"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Forget(vol); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Of(vol); err != nil || len(r.Attachments) != 0 {
		t.Fatalf("after forget: %+v, %v", r, err)
	}
	if left := leftovers(t, s.dir); len(left) != 0 {
		t.Fatalf("forget left %v", left)
	}
}

func TestCorruptRecordIsNeverNone(t *testing.T) {
	s := New(t.TempDir())
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.dir, vol+".json"), []byte("{half"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Attach(Request{VolumeID: vol, Node: "node-a", SingleNode: true}, nil); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("attach over a corrupt record = %v, want ErrCorrupt", err)
	}
	if err := s.Check(vol, "node-a", 1); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("check of a corrupt record = %v, want ErrCorrupt", err)
	}
}

// TestRacingControllersAttachOneNode: stores that share only the pool
// directory (as two controller replicas during a hand-over do) race to
// attach a single-node volume to different nodes; exactly one wins, and
// the record names the winner.
func TestRacingControllersAttachOneNode(t *testing.T) {
	dir := t.TempDir()
	const racers = 16
	var wg sync.WaitGroup
	wins := make(chan string, racers)
	errs := make(chan error, racers)
	for i := range racers {
		wg.Go(func() {
			node := fmt.Sprintf("node-%d", i)
			_, err := New(dir).Attach(Request{VolumeID: vol, Node: node, SingleNode: true}, nil)
			switch {
			case err == nil:
				wins <- node
			case !errors.Is(err, ErrAttachedElsewhere):
				errs <- err
			}
		})
	}
	wg.Wait()
	close(wins)
	close(errs)
	for err := range errs {
		t.Errorf("unexpected error: %v", err)
	}
	var won []string
	for n := range wins {
		won = append(won, n)
	}
	r, err := New(dir).Of(vol)
	if err != nil {
		t.Fatal(err)
	}
	if len(won) != 1 || len(r.Attachments) != 1 || r.Attachments[0].Node != won[0] {
		t.Fatalf("winners %v, record %+v: want exactly one, the same", won, r.Attachments)
	}
}

func TestOfNode(t *testing.T) {
	s := New(t.TempDir())
	for i, n := range []string{"node-a", "node-b", "node-a"} {
		id := fmt.Sprintf("fv1-img-3f9a0c2e-%032d", i)
		if _, err := s.Attach(Request{VolumeID: id, Node: n, SingleNode: true}, nil); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.OfNode("node-a")
	if err != nil || len(got) != 2 {
		t.Fatalf("OfNode(node-a) = %v, %v; want 2 volumes", got, err)
	}
	if got, _ := s.OfNode("node-c"); len(got) != 0 {
		t.Fatalf("OfNode(node-c) = %v", got)
	}
}

// TestDetachOfAForgottenVolumeLeavesNothing: external-attacher retries a
// detach after the volume was deleted (CSI: OK); taking the volume's lock
// for it made a lock file that nothing removed.
func TestDetachOfAForgottenVolumeLeavesNothing(t *testing.T) {
	s := New(t.TempDir())
	if _, err := s.Attach(Request{VolumeID: vol, Node: "node-a"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Detach(vol, "node-a"); err != nil {
		t.Fatal(err)
	}
	if err := s.Forget(vol); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := s.Detach(vol, "node-a"); err != nil {
			t.Fatal(err)
		}
	}
	if left := leftovers(t, s.dir); len(left) != 0 {
		t.Fatalf("a detach of a forgotten volume left %v", left)
	}
}

// TestRetireAndAttachAreOneStepEach: a DeleteVolume in one controller
// (Retire: no attachment, then the delete) and a ControllerPublishVolume
// in another (Attach: the volume exists, then the record) never both
// succeed: an attach of a deleted volume would leave a record nothing
// removes, and the CO would believe a deleted volume attached.
func TestRetireAndAttachAreOneStepEach(t *testing.T) {
	dir := t.TempDir()
	for round := range 50 {
		var deleted atomic.Bool
		exists := func() error {
			if deleted.Load() {
				return errGone
			}
			return nil
		}
		var attachErr, retireErr error
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, attachErr = New(dir).Attach(Request{VolumeID: vol, Node: "node-a", SingleNode: true}, exists)
		}()
		go func() {
			defer wg.Done()
			retireErr = New(dir).Retire(vol, func(r Record) error {
				if len(r.Attachments) > 0 {
					return errAttached
				}
				deleted.Store(true)
				return nil
			})
		}()
		wg.Wait()
		switch {
		case attachErr == nil && retireErr == nil:
			t.Fatalf("round %d: both the attach and the delete succeeded", round)
		case attachErr == nil:
			if !errors.Is(retireErr, errAttached) {
				t.Fatalf("round %d: delete: %v", round, retireErr)
			}
			if err := New(dir).Retire(vol, nil); err != nil { // detach and delete, for the next round
				t.Fatal(err)
			}
		case !errors.Is(attachErr, errGone) || retireErr != nil:
			t.Fatalf("round %d: attach %v, delete %v", round, attachErr, retireErr)
		}
		if left := leftovers(t, filepath.Join(dir, DirName)); len(left) != 0 {
			t.Fatalf("round %d: left %v", round, left)
		}
	}
}

var (
	errGone     = errors.New("volume gone")
	errAttached = errors.New("volume attached")
)

// TestKilledWritersTemporaryFilesGo: a controller killed between writing
// a record's temporary file and renaming it leaves the file; the next
// change of the record, or its removal, takes it away (under the lock no
// other writer of that record is at work).
func TestKilledWritersTemporaryFilesGo(t *testing.T) {
	dir := t.TempDir()
	s := New(dir)
	debris := func() string {
		p := filepath.Join(s.dir, tmpPrefix(vol)+"4242")
		if err := os.MkdirAll(s.dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("{half"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := debris()
	if _, err := s.Attach(Request{VolumeID: vol, Node: "node-a"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatalf("after an attach, the killed writer's %s: %v", p, err)
	}
	p = debris()
	if err := s.Forget(vol); err != nil {
		t.Fatal(err)
	}
	if left := leftovers(t, s.dir); len(left) != 0 {
		t.Fatalf("forget left %v", left)
	}
}
