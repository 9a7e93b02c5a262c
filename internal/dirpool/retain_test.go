package dirpool

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/filevol/filevol/internal/volume"
)

// deleteDirectory: "false" keeps the directory and its data where they
// were, and releases what was the volume's: its record, its gid (the next
// create of the range gets it), its limit and its level-1 qgroup. The
// note says where the data is; the directory's path stays taken, so a new
// claim never lands in it.
func TestDeleteCanRetainTheDirectory(t *testing.T) {
	p, dir := newPool(t)
	params := map[string]string{ParamDeleteDirectory: "false", ParamSubPathPattern: "${.PVC.namespace}/${.PVC.name}",
		ParamEnsureUnique: "false", ParamPVCNamespace: "ns", ParamPVCName: "keep",
		ParamGIDRangeStart: "7000", ParamGIDRangeEnd: "7001"}
	v := create(t, p, "pv-keep", 8*mib, params)
	if _, err := writeFile(filepath.Join(dir, v.Path, "data"), 4*mib); err != nil {
		t.Fatal(err)
	}
	before := qgroups(t, p)
	if err := p.Delete(context.Background(), v.ID); err != nil {
		t.Fatal(err)
	}
	if err := p.Delete(context.Background(), v.ID); err != nil {
		t.Fatalf("retried delete: %v", err)
	}
	if p.Known(v.ID) {
		t.Fatal("the record survived the delete")
	}
	if st, err := os.Stat(filepath.Join(dir, "ns", "keep", "data")); err != nil || st.Size() != 4*mib {
		t.Fatalf("retained data: %v %v", st, err)
	}
	notes, err := p.RetainedDirectories()
	if err != nil || len(notes) != 1 || notes[0].Path != "ns/keep" || notes[0].PVC != "ns/keep" || notes[0].GID != v.GID {
		t.Fatalf("notes %+v, %v", notes, err)
	}
	// The quota is released: the directory takes more than its old size.
	if _, err := writeFile(filepath.Join(dir, v.Path, "more"), 12*mib); err != nil {
		t.Errorf("write past the released limit: %v", err)
	}
	if v.Group != 0 && slices.Contains(qgroups(t, p), fmt.Sprintf("1_%d", v.Group)) {
		t.Errorf("the volume's level-1 qgroup survived: %v (before: %v)", qgroups(t, p), before)
	}
	// The gid is free again; the path is not.
	again := create(t, p, "pv-other", 8*mib, with(params, ParamPVCName, "other"))
	if again.GID != v.GID {
		t.Errorf("gid %d after the retaining delete, want %d again", again.GID, v.GID)
	}
	if _, err := p.Create(context.Background(), volume.CreateRequest{Name: "pv-same", CapacityBytes: 8 * mib, Parameters: params}); err == nil {
		t.Error("a new claim of the same namespace and name landed in the retained directory")
	}
	if cap, err := p.Capacity(); err != nil || cap.ProvisionedBytes != 8*mib {
		t.Errorf("provisioned %d (%v): the retained directory still counts", cap.ProvisionedBytes, err)
	}
}
