package pool

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/filevol/filevol/internal/volid"
	"github.com/filevol/filevol/internal/volume"
)

// A pool mints version 1 IDs that carry its own ID, except for a name
// that already has a volume under its version 0 ID (made before pools had
// IDs): a create retried across the upgrade must find that volume.
func TestPoolMintsIDs(t *testing.T) {
	dir := t.TempDir()
	p := openPool(t, dir, Options{})
	v, err := volid.ParseVolume(p.VolumeID("pvc-1"))
	if err != nil || v.Version != 1 || v.Pool != p.ID() || v.Kind != volid.KindImage {
		t.Fatalf("VolumeID = %+v, %v; want version 1 in pool %s", v, err, p.ID())
	}
	if p.VolumeID("a") == p.VolumeID("b") {
		t.Error("different names share an ID")
	}
	// The identity is the pool's, for good: reopened, the same IDs.
	id := p.ID()
	p.Close()
	if again := openPool(t, dir, Options{}); again.ID() != id {
		t.Errorf("reopened pool has ID %s, was %s", again.ID(), id)
	}
}

func TestLegacyVolumeKeepsItsID(t *testing.T) {
	dir := t.TempDir()
	p := openPool(t, dir, Options{})
	legacy := volid.LegacyVolume("old")
	// A record exactly as a filevol before version 1 wrote it.
	rec := `{"version":1,"id":"` + legacy + `","name":"old","capacityBytes":1048576,"fsType":"ext4","provisioning":"thin","node":"node-1","createdAt":"2026-01-01T00:00:00Z","imagePending":true}`
	if err := os.WriteFile(filepath.Join(dir, "volumes", legacy+".json"), []byte(rec), 0o600); err != nil {
		t.Fatal(err)
	}
	p.Close()
	p = openPool(t, dir, Options{})
	if got := p.VolumeID("old"); got != legacy {
		t.Errorf("VolumeID of a legacy volume = %s, want %s", got, legacy)
	}
	if v, err := p.GetByName("old"); err != nil || v.ID != legacy {
		t.Errorf("GetByName(old) = %+v, %v", v, err)
	}
	if _, err := p.Create(context.Background(), volume.CreateRequest{Name: "old", CapacityBytes: 1 << 20, FSType: "ext4"}); !errors.Is(err, volume.ErrAlreadyExists) {
		t.Errorf("a create of the legacy volume's name = %v, want ErrAlreadyExists (the CSI layer then compares)", err)
	}
}

func TestValidID(t *testing.T) {
	good := volid.NewVolume(volid.KindImage, "3f9a0c2e", "pvc-0f1e2d3c")
	tests := []struct {
		id      string
		ok      bool
		message string // part of the error message that says why
	}{
		{good, true, ""},
		{"fv-0123456789abcdef0123456789abcdef", true, ""},
		{"", false, "empty"},
		{"fv-", false, "hex digits"},
		{good + "0", false, "hex digits"},
		{"xx-0123456789abcdef0123456789abcdef", false, `does not start with "fv1-"`},
		{"fv-0123456789ABCDEF0123456789abcdef", false, "lowercase hex digit"},
		{"fv-0123456789abcdef0123456789abcde/", false, "lowercase hex digit"},
		{"fv-../../../../../../../../etc/pass", false, "lowercase hex digit"},
		{"fv-0123456789abcdef0123456789abcde\x00", false, "lowercase hex digit"},
		{strings.Repeat("a", 5000), false, "does not start"},
	}
	for _, tt := range tests {
		err := ValidID(tt.id)
		if tt.ok {
			if err != nil {
				t.Errorf("ValidID(%q) = %v, want nil", tt.id, err)
			}
			continue
		}
		if !errors.Is(err, volume.ErrInvalidID) {
			t.Errorf("ValidID(%q) = %v, want ErrInvalidID", tt.id, err)
		} else if !strings.Contains(err.Error(), tt.message) {
			t.Errorf("ValidID(%q) = %q, want it to say %q", tt.id, err, tt.message)
		}
		if len(err.Error()) > 300 {
			t.Errorf("ValidID message is %d bytes long", len(err.Error()))
		}
	}
}

func TestValidName(t *testing.T) {
	tests := []struct {
		name    string
		ok      bool
		message string
	}{
		{"pvc-6a4c1e9e-3c43-4c8c-9d5e-0a1b2c3d4e5f", true, ""},
		{"../../etc/passwd", true, ""}, // only its hash becomes a path
		{"ボリューム", true, ""},
		{strings.Repeat("n", volume.MaxNameLen), true, ""},
		{"", false, "empty"},
		{strings.Repeat("n", volume.MaxNameLen+1), false, "longer than 1024"},
		{"bad\xffutf8", false, "UTF-8"},
		{"nul\x00byte", false, "NUL"},
	}
	for _, tt := range tests {
		err := ValidName(tt.name)
		if tt.ok {
			if err != nil {
				t.Errorf("ValidName(%.20q) = %v, want nil", tt.name, err)
			}
			continue
		}
		// A bad name is a bad argument, never an unknown ID (NOT_FOUND).
		if !errors.Is(err, volume.ErrInvalidArgument) || errors.Is(err, volume.ErrInvalidID) || !strings.Contains(err.Error(), tt.message) {
			t.Errorf("ValidName(%.20q) = %v, want ErrInvalidArgument saying %q", tt.name, err, tt.message)
		}
	}
}
