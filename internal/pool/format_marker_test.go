package pool

import (
	"context"
	"testing"

	"github.com/filevol/filevol/internal/testutil"
)

func TestFormatMarker(t *testing.T) {
	p := openPool(t, testutil.Scratch(t, "pool"), Options{})
	v, err := p.Create(context.Background(), CreateRequest{Name: "fmt", CapacityBytes: 1 << 20, FSType: "ext4"})
	if err != nil {
		t.Fatal(err)
	}
	if p.FormatInterrupted(v.ID) {
		t.Fatal("fresh volume reported as interrupted format")
	}
	if err := p.BeginFormat(v.ID); err != nil {
		t.Fatal(err)
	}
	if !p.FormatInterrupted(v.ID) {
		t.Fatal("marker not seen")
	}
	// A reopened pool (the crash case) still sees it and lists no orphan for it.
	p2, err := Open(p.Dir(), Options{NodeID: "n"})
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	if !p2.FormatInterrupted(v.ID) {
		t.Fatal("marker lost across reopen")
	}
	if err := p.EndFormat(v.ID); err != nil || p.FormatInterrupted(v.ID) {
		t.Fatalf("EndFormat: %v, still marked %v", err, p.FormatInterrupted(v.ID))
	}
	// Delete removes a marker left by a format that never finished.
	if err := p.BeginFormat(v.ID); err != nil {
		t.Fatal(err)
	}
	if err := p.Delete(context.Background(), v.ID); err != nil {
		t.Fatal(err)
	}
	if p.FormatInterrupted(v.ID) {
		t.Fatal("marker outlived its volume")
	}
}
