package attach

import (
	"os"
	"testing"

	"github.com/filevol/filevol/internal/inuse"
)

// The node's client an attach is given is kept in the attachment, carried
// into the last detach (another node's attach fences it), and replaced by
// a repeated attach that names another one (the node mounted the pool
// again); a repeat without a client changes nothing. A record written
// before clients were recorded reads with none.
func TestAttachmentKeepsTheNodesClient(t *testing.T) {
	dir := t.TempDir()
	s := New(dir)
	c1 := &inuse.Client{Kind: "cephfs", ID: 4127, Cluster: "d034fad0-ebd3-4b1c-b9b7-4e42fe4397f3"}
	c2 := &inuse.Client{Kind: "cephfs", ID: 4301, Cluster: c1.Cluster}
	req := Request{VolumeID: vol, Node: "node-a", SingleNode: true, Client: c1}
	a, err := s.Attach(req, nil)
	if err != nil || a.Client == nil || *a.Client != *c1 {
		t.Fatalf("attach = %+v, %v; want client %+v", a, err, *c1)
	}
	client := func() inuse.Client {
		t.Helper()
		r, err := New(dir).Of(vol)
		if err != nil || len(r.Attachments) != 1 || r.Attachments[0].Client == nil {
			t.Fatalf("record = %+v, %v", r, err)
		}
		return *r.Attachments[0].Client
	}
	if got := client(); got != *c1 {
		t.Fatalf("recorded client %+v, want %+v", got, *c1)
	}
	req.Client = nil
	if again, err := s.Attach(req, nil); err != nil || again.Epoch != a.Epoch || client() != *c1 {
		t.Fatalf("repeat without a client = %+v, %v; the record's client %+v, want %+v kept", again, err, client(), *c1)
	}
	req.Client = c2
	if again, err := s.Attach(req, nil); err != nil || again.Epoch != a.Epoch || again.Client == nil || *again.Client != *c2 || client() != *c2 {
		t.Fatalf("repeat with another client = %+v, %v; the record's %+v, want %+v under epoch %d", again, err, client(), *c2, a.Epoch)
	}
	if err := s.Detach(vol, "node-a"); err != nil {
		t.Fatal(err)
	}
	r, err := s.Of(vol)
	if err != nil || r.LastDetach == nil || r.LastDetach.Client == nil || *r.LastDetach.Client != *c2 {
		t.Fatalf("after the detach: %+v, %v; want the last detach naming client %+v", r, err, *c2)
	}

	old := `{"version":1,"volumeID":"` + vol + `","lastEpoch":3,"attachments":[{"node":"node-b","epoch":3,"since":"2026-01-02T03:04:05Z"}]}`
	if err := os.WriteFile(s.recordPath(vol), []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Of(vol); err != nil || len(r.Attachments) != 1 || r.Attachments[0].Client != nil {
		t.Fatalf("a record without clients = %+v, %v", r, err)
	}
}
