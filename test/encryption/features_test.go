package encryption

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
)

// What else a volume does works on an encrypted one: its health and stats,
// I/O limits set at create and changed live (ControllerModifyVolume), a
// group snapshot whose restored member opens with the same Secret, and
// changed-block tracking, which describes the image's ciphertext blocks:
// the delta between two snapshots covers what a pod wrote in between.
func TestEncryptedVolumeFeatures(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	params := map[string]string{"encryption": "fscrypt", "writeIOPS": "100"}
	a, b := e.mustCreate("feat-a", params, nil), e.mustCreate("feat-b", encParams, nil)
	m := marker(t)
	for _, id := range []string{a, b} {
		if err := os.WriteFile(filepath.Join(e.up(id, oldKey), "m"), []byte(m), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r, err := e.d.Node.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: a, VolumePath: e.target(a)})
	if err != nil || len(r.GetUsage()) == 0 {
		t.Fatalf("stats of an encrypted volume: %v, %v", r, err)
	}
	h, err := e.d.Node.NodeGetVolumeHealth(ctx, &csipb.NodeGetVolumeHealthRequest{VolumeId: a, VolumePublishPath: e.target(a)})
	if err != nil || len(h.GetVolumeHealth().GetHealthStatuses()) != 0 {
		t.Fatalf("health of a sound encrypted volume: %v, %v; want no adverse status", h, err)
	}
	if _, err := e.d.Controller.ControllerModifyVolume(ctx, &csipb.ControllerModifyVolumeRequest{VolumeId: a,
		MutableParameters: map[string]string{"writeIOPS": "200"}}); err != nil {
		t.Fatalf("I/O limits changed live on an encrypted volume: %v", err)
	}
	if v, err := e.d.Pool.Get(a); err != nil || v.QoS.WriteIOPS != 200 || v.Encryption == nil {
		t.Fatalf("record after the change: %+v, %v; want writeIOPS 200 and still encrypted", v, err)
	}
	for _, id := range []string{a, b} {
		e.down(id)
	}

	// A group snapshot of the two; a member restored opens with the Secret.
	g, err := e.d.Group.CreateVolumeGroupSnapshot(ctx, &csipb.CreateVolumeGroupSnapshotRequest{Name: "pair", SourceVolumeIds: []string{a, b}})
	if err != nil {
		t.Fatalf("group snapshot of encrypted volumes: %v", err)
	}
	gid := g.GetGroupSnapshot().GetGroupSnapshotId()
	t.Cleanup(func() {
		_, _ = e.d.Group.DeleteVolumeGroupSnapshot(ctx, &csipb.DeleteVolumeGroupSnapshotRequest{GroupSnapshotId: gid,
			SnapshotIds: snapshotIDs(g.GetGroupSnapshot())})
	})
	member := g.GetGroupSnapshot().GetSnapshots()[0]
	restored := e.mustCreate("feat-restored", encParams, snapshotSource(member.GetSnapshotId()))
	if got, err := os.ReadFile(filepath.Join(e.up(restored, oldKey), "m")); err != nil || string(got) != m {
		t.Errorf("a restored member of the group: %q, %v", got, err)
	}
	e.down(restored)

	// Changed blocks: a file written between two snapshots of a is in the
	// delta, as ciphertext blocks of the image.
	s1 := e.snapshot("feat-s1", a)
	if err := os.WriteFile(filepath.Join(e.up(a, oldKey), "more"), make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	e.down(a)
	s2 := e.snapshot("feat-s2", a)
	stream, err := e.d.Meta.GetMetadataDelta(ctx, &csipb.GetMetadataDeltaRequest{BaseSnapshotId: s1, TargetSnapshotId: s2})
	if err != nil {
		t.Fatal(err)
	}
	var changed int64
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("delta of an encrypted volume: %v", err)
		}
		for _, bm := range resp.GetBlockMetadata() {
			changed += bm.GetSizeBytes()
		}
	}
	if changed < 1<<20 {
		t.Errorf("delta of an encrypted volume after 1 MiB written: %d bytes", changed)
	}
	t.Logf("delta after 1 MiB written through fscrypt: %d bytes", changed)
}

func (e *env) snapshot(name, src string) string {
	e.t.Helper()
	s, err := e.d.Controller.CreateSnapshot(context.Background(), &csipb.CreateSnapshotRequest{Name: name, SourceVolumeId: src})
	if err != nil {
		e.t.Fatalf("snapshot %s: %v", name, err)
	}
	id := s.GetSnapshot().GetSnapshotId()
	e.t.Cleanup(func() {
		_, _ = e.d.Controller.DeleteSnapshot(context.Background(), &csipb.DeleteSnapshotRequest{SnapshotId: id})
	})
	return id
}

func snapshotSource(id string) *csipb.VolumeContentSource {
	return &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Snapshot{
		Snapshot: &csipb.VolumeContentSource_SnapshotSource{SnapshotId: id}}}
}

func snapshotIDs(g *csipb.VolumeGroupSnapshot) []string {
	var ids []string
	for _, s := range g.GetSnapshots() {
		ids = append(ids, s.GetSnapshotId())
	}
	return ids
}

// A restore carries its source's wrapped key: staged with a Secret that
// holds another key it is refused, naming the field, and nothing is
// formatted; with the source's key it opens.
func TestRestoreWithAnotherSecretRefused(t *testing.T) {
	e := start(t)
	id := e.mustCreate("other-src", encParams, nil)
	m := marker(t)
	if err := os.WriteFile(filepath.Join(e.up(id, oldKey), "m"), []byte(m), 0o644); err != nil {
		t.Fatal(err)
	}
	e.down(id)
	restored := e.mustCreate("other-restored", encParams, snapshotSource(e.snapshot("other-snap", id)))
	wantCode(t, "a restore staged with another Secret", e.stage(restored, newKey), codes.FailedPrecondition, "encryptionKey")
	if sig := e.signature(restored); sig != "ext4" {
		t.Errorf("after the refusal the restored image holds %q, want its ext4 untouched", sig)
	}
	if got, err := os.ReadFile(filepath.Join(e.up(restored, oldKey), "m")); err != nil || string(got) != m {
		t.Errorf("the restore with its source's key: %q, %v", got, err)
	}
	e.down(restored)
}
