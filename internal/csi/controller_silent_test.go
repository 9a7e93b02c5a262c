package csi

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"

	"github.com/filevol/filevol/internal/attach"
	"github.com/filevol/filevol/internal/inuse"
	"github.com/filevol/filevol/internal/poolowner"
)

// stall makes path a FIFO: a read of it waits, as a read of a file a
// silent CephFS client holds exclusive capabilities on waits for the MDS.
// The returned func lets a waiting read go (it reads nothing) and puts
// back what was there; the test's cleanup calls it too.
func stall(t *testing.T, path string) (release func()) {
	t.Helper()
	kept := path + ".kept"
	had := os.Rename(path, kept) == nil
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	done := false
	release = func() {
		if done {
			return
		}
		done = true
		// A reader that is waiting, or comes within the second, is let go.
		for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			if fd, err := unix.Open(path, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0); err == nil {
				unix.Close(fd)
				break
			}
		}
		os.Remove(path)
		if had {
			os.Rename(kept, path)
		}
	}
	t.Cleanup(release)
	return release
}

// A node whose in-use record does not answer while the pool does is
// silent: the controller fences the client its attachment names, at the
// force-detach and at another node's attach after a force-detach without
// credentials (whose refusal names that client), and the call returns
// once the wait for the record is over, not when the record answers.
// Without a client in the attachment (a node that noted none, an earlier
// version's record) the controller waits for the record as before; and
// when the pool itself does not answer, it waits too, never taking a slow
// pool for a silent node.
func TestSilentNodeFencedByItsAttachmentsClient(t *testing.T) {
	f := &fakeFence{}
	e := newFenceEnvWith(t, f.fence)
	e.ctl.silentAfter = 300 * time.Millisecond
	// Bounds the calls that must not wait for a silent record: without
	// the fence by the attachment's client they fail at this deadline.
	ctx, cancelAll := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancelAll()
	dir := e.pool.Dir()
	recordOf := func(id string) string { return filepath.Join(dir, inuse.DirName, id+"@"+inuse.NodeKey("n1")+".json") }
	attached := func(name string) string { return e.attached(t, name, "n1") }
	unpublish := func(ctx context.Context, id string, secrets map[string]string) error {
		_, err := e.ctl.ControllerUnpublishVolume(ctx, &csipb.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: "n1", Secrets: secrets})
		return err
	}

	// n1 noted no client: the force-detach waits for its record.
	id := attached("unnoted")
	stall(t, recordOf(id))
	short, cancel := context.WithTimeout(ctx, 4*e.ctl.silentAfter)
	err := unpublish(short, id, creds)
	cancel()
	if codeOf(err) != codes.DeadlineExceeded {
		t.Fatalf("force-detach of a silent node that noted no client: %v; want it waiting for the record until the call's deadline", err)
	}
	if f.took("fence") {
		t.Fatalf("fenced without a client: %s", f.String())
	}

	client := inuse.Client{Kind: "cephfs", ID: 4127, Cluster: "d034fad0-ebd3-4b1c-b9b7-4e42fe4397f3"}
	if err := poolowner.NoteClient(dir, "n1", client); err != nil {
		t.Fatal(err)
	}
	id = attached("silent")
	if rec, err := attach.New(dir).Of(id); err != nil || len(rec.Attachments) != 1 || rec.Attachments[0].Client == nil || *rec.Attachments[0].Client != client {
		t.Fatalf("the attachment of a node that noted its client: %+v, %v; want client %+v", rec, err, client)
	}
	stall(t, recordOf(id))
	f.holdImage(t, e, id)
	// Without credentials the force-detach goes on; the attach is refused
	// naming the client the attachment recorded.
	if err := unpublish(ctx, id, nil); err != nil {
		t.Fatalf("force-detach of a silent node without credentials: %v", err)
	}
	_, err = e.publish(id, "n2")
	if wantCode(t, "n2's attach without credentials", err, codes.FailedPrecondition); !strings.Contains(err.Error(), "node n1 does not answer") || !strings.Contains(err.Error(), "through cephfs client 4127") {
		t.Errorf("the refusal does not name n1's client: %v", err)
	}
	begin := time.Now()
	if _, err := e.ctl.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "n2",
		VolumeCapability: capMount("ext4", rw), Secrets: creds}); err != nil {
		t.Fatalf("n2's attach with credentials, n1 silent: %v", err)
	}
	t.Logf("n2 attached %v after its call, n1's record silent", time.Since(begin).Round(time.Millisecond))
	if !f.took("fence {Call:ControllerPublishVolume VolumeID:" + id + " Node:n1 Client:{Kind:cephfs ID:4127 Cluster:d034fad0-") {
		t.Fatalf("the attach did not fence n1's client: %s", f.String())
	}

	// The force-detach with credentials fences at once.
	id = attached("forced")
	stall(t, recordOf(id))
	f.holdImage(t, e, id)
	if err := unpublish(ctx, id, creds); err != nil {
		t.Fatalf("force-detach of a silent node: %v", err)
	}
	if !f.took("fence {Call:ControllerUnpublishVolume VolumeID:" + id + " Node:n1 Client:{Kind:cephfs ID:4127") {
		t.Fatalf("the force-detach did not fence n1's client: %s", f.String())
	}
	if rec, err := attach.New(dir).Of(id); err != nil || len(rec.Attachments) != 0 || rec.LastDetach == nil || rec.LastDetach.Client == nil || *rec.LastDetach.Client != client {
		t.Fatalf("after the force-detach: %+v, %v; want no attachment, the last detach naming %+v", rec, err, client)
	}

	// The pool is slow: the attachment record does not answer either.
	id = attached("slowpool")
	stall(t, recordOf(id))
	stall(t, filepath.Join(dir, attach.DirName, id+".json"))
	st, err := e.ctl.stores.volume(id)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel = context.WithTimeout(ctx, 4*e.ctl.silentAfter)
	defer cancel()
	if _, _, err := e.ctl.fenceGone(short, st, "ControllerUnpublishVolume", id, "n1", &client, creds); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("fence with the pool not answering: %v; want it waiting for n1's record until the deadline", err)
	}
	if f.took("fence {Call:ControllerUnpublishVolume VolumeID:" + id) {
		t.Fatalf("a slow pool was taken for a silent node: %s", f.String())
	}
}
