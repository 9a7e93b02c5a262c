package volid

import (
	"errors"
	"strings"
	"testing"
)

const pool = "3f9a0c2e"

func TestVolumeRoundTrip(t *testing.T) {
	id := NewVolume(KindImage, pool, "pvc-1")
	if len(id) > 128 {
		t.Fatalf("ID %q is %d bytes: the CSI spec caps IDs at 128", id, len(id))
	}
	v, err := ParseVolume(id)
	if err != nil {
		t.Fatal(err)
	}
	if v != (Volume{Version: 1, Kind: KindImage, Pool: pool, Hash: hash("pvc-1")}) {
		t.Errorf("ParseVolume(%s) = %+v", id, v)
	}
	if NewVolume(KindImage, pool, "pvc-1") != id || NewVolume(KindImage, pool, "pvc-2") == id ||
		NewVolume(KindImage, "00000000", "pvc-1") == id {
		t.Error("IDs must depend on the name and the pool, and on nothing else")
	}
}

func TestLegacyIDsStillParse(t *testing.T) {
	v, err := ParseVolume(LegacyVolume("pvc-1"))
	if err != nil || v.Version != 0 || v.Kind != KindImage || v.Pool != "" || v.Hash != hash("pvc-1") {
		t.Errorf("legacy volume ID: %+v, %v", v, err)
	}
	// The shape every filevol before version 1 made: fv- and 32 hex.
	if !strings.HasPrefix(LegacyVolume("x"), "fv-") || len(LegacyVolume("x")) != 35 {
		t.Errorf("LegacyVolume = %q, not the old shape", LegacyVolume("x"))
	}
	s, err := ParseSnapshot(LegacySnapshot("snap"))
	if err != nil || s.Version != 0 || s.Hash != hash("snap") {
		t.Errorf("legacy snapshot ID: %+v, %v", s, err)
	}
}

func TestSnapshotRoundTrip(t *testing.T) {
	id := NewSnapshot(pool, "snap")
	s, err := ParseSnapshot(id)
	if err != nil || s != (Snapshot{Version: 1, Pool: pool, Hash: hash("snap")}) {
		t.Errorf("ParseSnapshot(%s) = %+v, %v", id, s, err)
	}
	if _, err := ParseVolume(id); err == nil {
		t.Error("a snapshot ID parsed as a volume ID")
	}
	if _, err := ParseSnapshot(NewVolume(KindImage, pool, "snap")); err == nil {
		t.Error("a volume ID parsed as a snapshot ID")
	}
}

func TestInvalidIDs(t *testing.T) {
	good := NewVolume(KindImage, pool, "n")
	for _, id := range []string{
		"", "fv-", "fv-zz", "../../etc/passwd", "fv-" + strings.Repeat("0", 31) + "/",
		"fv1-img-" + pool + "-" + strings.Repeat("0", 31),
		"fv1-nfs-" + pool + "-" + hash("n"), // a kind this filevol does not know
		"fv1-img-3F9A0C2E-" + hash("n"),     // upper case
		"fv1-img-" + pool + "-" + hash("n") + "-x",
		"fv1-img--" + hash("n"),
		strings.Replace(good, "-", "\x00", 1),
		good + "\x00",
		strings.Repeat("a", 4096),
	} {
		if _, err := ParseVolume(id); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseVolume(%.60q) = %v, want ErrInvalid", id, err)
		}
	}
	if err := ValidPool("3f9a0c2"); !errors.Is(err, ErrInvalid) {
		t.Errorf("ValidPool of 7 digits = %v", err)
	}
}

// A router reads a well-formed ID of any kind (it then answers that it
// serves no such kind); a pool, through ParseVolume, only its own kinds.
func TestAnyKind(t *testing.T) {
	id := "fv1-nfs-" + pool + "-" + hash("n")
	v, err := ParseVolumeAnyKind(id)
	if err != nil || v != (Volume{Version: 1, Kind: "nfs", Pool: pool, Hash: hash("n")}) {
		t.Errorf("ParseVolumeAnyKind(%s) = %+v, %v", id, v, err)
	}
	if _, err := ParseVolume(id); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "does not know") {
		t.Errorf("ParseVolume of an unknown kind = %v, want ErrInvalid naming the kind", err)
	}
	for _, l := range []string{LegacyVolume("n"), NewVolume(KindImage, pool, "n")} {
		a, aerr := ParseVolumeAnyKind(l)
		b, berr := ParseVolume(l)
		if aerr != nil || berr != nil || a != b {
			t.Errorf("%s: ParseVolumeAnyKind = %+v, %v; ParseVolume = %+v, %v", l, a, aerr, b, berr)
		}
	}
	for _, kind := range []string{"", "IMG", "im9", "i_g", "abcdefghi", "\x00"} {
		bad := "fv1-" + kind + "-" + pool + "-" + hash("n")
		if _, err := ParseVolumeAnyKind(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseVolumeAnyKind(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}

// Every ID an accepted parse returns is safe as a file name.
func FuzzParseVolume(f *testing.F) {
	f.Add(NewVolume(KindImage, pool, "n"))
	f.Add(LegacyVolume("n"))
	f.Add("fv1-img-../-x")
	f.Fuzz(func(t *testing.T, id string) {
		if _, err := ParseVolumeAnyKind(id); err != nil {
			if _, err := ParseVolume(id); err == nil {
				t.Fatalf("ParseVolume accepted %q, which ParseVolumeAnyKind refuses", id)
			}
			return
		}
		if strings.ContainsAny(id, "/\x00") || strings.Contains(id, "..") || len(id) > 128 {
			t.Fatalf("accepted %q", id)
		}
	})
}

func TestGroupSnapshotRoundTrip(t *testing.T) {
	id := NewGroupSnapshot(pool, "group")
	g, err := ParseGroupSnapshot(id)
	if err != nil || g != (Snapshot{Version: 1, Pool: pool, Hash: hash("group")}) {
		t.Errorf("ParseGroupSnapshot(%s) = %+v, %v", id, g, err)
	}
	if _, err := ParseSnapshot(id); err == nil {
		t.Error("a group snapshot ID parsed as a snapshot ID")
	}
	for _, bad := range []string{"", NewSnapshot(pool, "group"), "fg1-" + pool, "fg1-" + pool + "-" + hash("g") + "/..", "fg1-zzzzzzzz-" + hash("g")} {
		if _, err := ParseGroupSnapshot(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseGroupSnapshot(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}
