package csi

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/filevol/filevol/internal/answer"
	"github.com/filevol/filevol/internal/attach"
	"github.com/filevol/filevol/internal/hostos/ofd"
	"github.com/filevol/filevol/internal/inuse"
	"github.com/filevol/filevol/internal/volume"
)

// fakeFence is a kind's fence as the controller reaches it: it logs each
// request (its secrets too, as "secret fence k=v"), answers err, and on
// success lets go of the image's lock, as the node's client's eviction
// does.
type fakeFence struct {
	fakeLog
	err  error
	held *os.File
}

func (f *fakeFence) fence(_ context.Context, r volume.FenceRequest) error {
	f.add("fence %+v", r)
	f.addSecrets("fence", r.Secrets)
	if f.err != nil {
		return f.err
	}
	if r.Secrets["adminKey"] == "" {
		return volume.ErrNoFenceCredentials
	}
	f.held.Close()
	return nil
}

// holdImage locks the volume's image as n1's device would and gives the
// lock to f.
func (f *fakeFence) holdImage(t *testing.T, e *fenceEnv, id string) {
	t.Helper()
	h, err := os.OpenFile(e.pool.ImagePath(id), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	if err := (ofd.Kernel{}).TryLock(h, ofd.Write, ofd.Whole); err != nil {
		t.Fatal(err)
	}
	f.held = h
}

var creds = map[string]string{"adminID": "fence", "adminKey": "s3cr3t"}

// The secrets of ControllerUnpublishVolume and ControllerPublishVolume
// reach the kind's fence with the client the node recorded, only when the
// node's record names a client, its detach is not pending and the
// image's lock holds; printed, the request shows no secret. The fence's
// refusal is the call's, and nothing changes; without credentials the
// calls behave as before, the refusal saying what credentials would do.
func TestFenceReceivesTheSecrets(t *testing.T) {
	f := &fakeFence{}
	e := newFenceEnvWith(t, f.fence)
	ctx := context.Background()
	client := &inuse.Client{Kind: "cephfs", ID: 4127, Cluster: "d034fad0-ebd3-4b1c-b9b7-4e42fe4397f3"}
	attached := func(name string) string {
		t.Helper()
		id := e.attached(t, name, "n1")
		f.holdImage(t, e, id)
		return id
	}
	unpublish := func(id string, secrets map[string]string) error {
		_, err := e.ctl.ControllerUnpublishVolume(ctx, &csipb.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: "n1", Secrets: secrets})
		return err
	}
	put := func(ent inuse.Entry) {
		t.Helper()
		if err := e.inuse.Put(ent); err != nil {
			t.Fatal(err)
		}
	}

	// Not asked: no record, a record without a client, a pending detach.
	for i, ent := range []*inuse.Entry{nil, {Node: "n1", StagingPath: "/s"},
		{Node: "n1", StagingPath: "/s", Client: client, Pending: &inuse.PendingDetach{Device: "/dev/loop3"}}} {
		id := attached(fmt.Sprintf("quiet%d", i))
		if ent != nil {
			ent.VolumeID = id
			put(*ent)
		}
		if err := unpublish(id, creds); err != nil {
			t.Fatal(err)
		}
		if f.took("fence") {
			t.Fatalf("case %d: the kind was asked to fence: %s", i, f.String())
		}
	}

	// The fence refuses (the cluster's answer to a wrong key): the call's
	// answer, the attachment kept.
	id := attached("refused")
	put(inuse.Entry{VolumeID: id, Node: "n1", StagingPath: "/s", Client: client})
	f.err = answer.FailedPrecondition("the cluster refused the credentials of adminID and adminKey; nothing was changed")
	wantCode(t, "force-detach, the fence refused", unpublish(id, creds), codes.FailedPrecondition)
	if rec, err := attach.New(e.pool.Dir()).Of(id); err != nil {
		t.Fatal(err)
	} else if _, ok := rec.Find("n1"); !ok {
		t.Fatalf("a refused fence dropped the attachment: %+v", rec)
	}
	if !f.took("secret fence adminKey=s3cr3t") || !f.took("fence {Call:ControllerUnpublishVolume VolumeID:"+id+" Node:n1 Client:{Kind:cephfs ID:4127 Cluster:d034fad0-") {
		t.Fatalf("the kind did not get the force-detach's secrets and n1's client: %s", f.String())
	}
	f.err = nil

	// The force-detach with credentials: fenced, the lock gone, n2
	// attached at once.
	if err := unpublish(id, creds); err != nil {
		t.Fatal(err)
	}
	if _, err := e.publish(id, "n2"); err != nil {
		t.Fatalf("n2's attach after n1 was fenced: %v", err)
	}

	// Without credentials: the force-detach as before, the attach refused
	// saying what credentials would do; with them, fenced at the attach.
	id = attached("onattach")
	put(inuse.Entry{VolumeID: id, Node: "n1", StagingPath: "/s", Client: client})
	if err := unpublish(id, nil); err != nil {
		t.Fatal(err)
	}
	_, err := e.publish(id, "n2")
	wantCode(t, "attach without credentials", err, codes.FailedPrecondition)
	for _, want := range []string{"still holds the image", "node n1 staged it through cephfs client 4127", "controller-publish Secret", "adminID and adminKey"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal without credentials does not say %q: %v", want, err)
		}
	}
	if _, err := e.ctl.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "n2",
		VolumeCapability: capMount("ext4", rw), Secrets: creds}); err != nil {
		t.Fatalf("n2's attach with credentials: %v", err)
	}
	if !f.took("fence {Call:ControllerPublishVolume VolumeID:" + id + " Node:n1") {
		t.Errorf("the attach did not fence n1: %s", f.String())
	}
	for _, c := range strings.Split(f.String(), "; ") {
		if strings.Contains(c, "s3cr3t") && !strings.HasPrefix(c, "secret ") {
			t.Errorf("a printed request holds a secret's value: %s", c)
		}
	}
}
