package pool

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/filevol/filevol/internal/volume"
)

// Limits survive a reopen; a volume without limits has a record without
// "qos", as records written before limits existed, which read as
// unlimited.
func TestQoSRecord(t *testing.T) {
	dir := t.TempDir()
	p := openPool(t, dir, Options{})
	v := mustCreate(t, p, volume.CreateRequest{Name: "a", CapacityBytes: 1 << 20, QoS: &volume.QoS{WriteIOPS: 100}})
	rec := filepath.Join(dir, "volumes", v.ID+".json")
	if _, err := p.SetQoS(v.ID, volume.QoS{ReadBytesPerSecond: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.SetQoS(v.ID, volume.QoS{ReadIOPS: -1}); err == nil {
		t.Fatal("a negative limit was accepted")
	}
	p.Close()
	p = openPool(t, dir, Options{})
	got, err := p.Get(v.ID)
	if err != nil || got.Limits() != (volume.QoS{ReadBytesPerSecond: 1 << 20}) {
		t.Fatalf("after reopen: %+v, %v", got.QoS, err)
	}
	if _, err := p.SetQoS(v.ID, volume.QoS{}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(rec)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "qos") {
		t.Fatalf("record of an unlimited volume: %s", b)
	}
	if got, err := p.Get(v.ID); err != nil || got.QoS != nil || !got.Limits().IsZero() {
		t.Fatalf("unlimited record reads as %+v, %v", got, err)
	}
}
