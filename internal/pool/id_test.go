package pool

import (
	"errors"
	"strings"
	"testing"
)

func TestVolumeID(t *testing.T) {
	tests := []struct {
		name, want string
	}{
		{"pvc-1", "fv-" + sha256Hex("pvc-1")[:32]},
		{"", "fv-e3b0c44298fc1c149afbf4c8996fb924"}, // sha256sum </dev/null
		{"ünïcode/../name", "fv-" + sha256Hex("ünïcode/../name")[:32]},
	}
	for _, tt := range tests {
		got := VolumeID(tt.name)
		if got != tt.want {
			t.Errorf("VolumeID(%q) = %q, want %q", tt.name, got, tt.want)
		}
		if err := ValidID(got); err != nil {
			t.Errorf("ValidID(VolumeID(%q)): %v", tt.name, err)
		}
	}
	if VolumeID("a") == VolumeID("b") {
		t.Error("different names share an ID")
	}
}

func TestValidID(t *testing.T) {
	good := VolumeID("pvc-0f1e2d3c")
	tests := []struct {
		id      string
		ok      bool
		message string // part of the error message that says why
	}{
		{good, true, ""},
		{"fv-0123456789abcdef0123456789abcdef", true, ""},
		{"", false, "empty"},
		{"fv-", false, "is 3 bytes"},
		{good + "0", false, "is 36 bytes"},
		{good[:34], false, "is 34 bytes"},
		{"xx-0123456789abcdef0123456789abcdef", false, `does not start with "fv-"`},
		{"fv-0123456789ABCDEF0123456789abcdef", false, "lowercase hex digit"},
		{"fv-0123456789abcdef0123456789abcde/", false, "lowercase hex digit"},
		{"fv-../../../../../../../../etc/pass", false, "lowercase hex digit"},
		{"fv-0123456789abcdef0123456789abcde\x00", false, "lowercase hex digit"},
		{strings.Repeat("a", 5000), false, "is 5000 bytes"},
	}
	for _, tt := range tests {
		err := ValidID(tt.id)
		if tt.ok {
			if err != nil {
				t.Errorf("ValidID(%q) = %v, want nil", tt.id, err)
			}
			continue
		}
		if !errors.Is(err, ErrInvalidID) {
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
		{strings.Repeat("n", MaxNameLen), true, ""},
		{"", false, "empty"},
		{strings.Repeat("n", MaxNameLen+1), false, "longer than 1024"},
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
		if !errors.Is(err, ErrInvalidID) || !strings.Contains(err.Error(), tt.message) {
			t.Errorf("ValidName(%.20q) = %v, want ErrInvalidID saying %q", tt.name, err, tt.message)
		}
	}
}
