package pool

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/filevol/filevol/internal/recordstore"
	"github.com/filevol/filevol/internal/volume"
)

// The records' on-disk form, as the stores encode and check it.
func encodeRecord(v *volume.Volume) ([]byte, error) { return recordstore.Encode(*v) }
func decodeRecord(path, id string, data []byte) (volume.Volume, error) {
	return recordstore.Decode[volume.Volume](path, "volume", id, recordVersion, data)
}
func encodeSnapshot(s *volume.Snapshot) ([]byte, error) { return recordstore.Encode(*s) }
func decodeSnapshotRecord(path, id string, data []byte) (volume.Snapshot, error) {
	return recordstore.Decode[volume.Snapshot](path, "snapshot", id, recordVersion, data)
}

// The fuzz targets below hold the pool's validators and record decoders to
// their contract on any input (a client may send anything): no panic; an ID
// they accept is one file name, never a path; a record they accept is the
// current version, holds the ID its file is named after, and encodes back
// to a record that decodes the same.

// pathSafe fails t unless id can only ever name one file in a directory.
func pathSafe(t *testing.T, what, id string) {
	t.Helper()
	if id == "" || id == "." || id == ".." || filepath.Base(id) != id || strings.ContainsAny(id, "/\x00") {
		t.Fatalf("accepted %s %q, which is not a plain file name", what, id)
	}
}

func FuzzValidID(f *testing.F) {
	for _, s := range []string{VolumeID("pvc-1"), "", "fv-", "fv-../../etc/passwd", "fv-" + strings.Repeat("A", 32),
		"fv-" + strings.Repeat("0", 32-1) + "/", "fv-" + strings.Repeat("0", 32) + "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if err := validID(id); err != nil {
			if !errors.Is(err, volume.ErrInvalidID) {
				t.Fatalf("validID(%q) = %v, not ErrInvalidID", id, err)
			}
			return
		}
		pathSafe(t, "volume ID", id)
		if !(len(id) == 35 && strings.HasPrefix(id, "fv-")) && !(len(id) == 49 && strings.HasPrefix(id, "fv1-img-")) {
			t.Fatalf("accepted volume ID %q of neither version's shape", id)
		}
	})
}

func FuzzValidSnapshotID(f *testing.F) {
	for _, s := range []string{SnapshotID("snap-1"), "", "fs-", VolumeID("pvc-1"), "fs-../x", "fs-" + strings.Repeat("f", 100)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if err := validSnapshotID(id); err != nil {
			return
		}
		pathSafe(t, "snapshot ID", id)
	})
}

// FuzzValidName: a name validName accepts always hashes to a valid ID,
// which is how a name reaches the disk.
func FuzzValidName(f *testing.F) {
	for _, s := range []string{"pvc-3f1c", "", "a\x00b", "\xff\xfe", strings.Repeat("n", volume.MaxNameLen+1), "../../etc"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if err := validName(name); err != nil {
			if !errors.Is(err, volume.ErrInvalidArgument) {
				t.Fatalf("validName(%q) = %v, not ErrInvalidArgument", name, err)
			}
			return
		}
		if err := validID(VolumeID(name)); err != nil {
			t.Fatalf("name %q hashes to an invalid ID: %v", name, err)
		}
	})
}

func FuzzDecodeRecord(f *testing.F) {
	id := VolumeID("pvc-1")
	good, err := encodeRecord(&volume.Volume{Version: recordVersion, ID: id, Name: "pvc-1", CapacityBytes: 1 << 30,
		FSType: "ext4", Provisioning: volume.ProvisioningThin, Parameters: map[string]string{"k": "v"}, Node: "n1",
		ContentSource: &volume.ContentSource{Kind: volume.SourceSnapshot, ID: SnapshotID("s")}, CreatedAt: time.Unix(1, 0).UTC()})
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range [][]byte{good, nil, []byte("{}"), []byte(`{"version":1}`), []byte(`{"version":99,"id":"` + id + `"}`),
		good[:len(good)/2], []byte(`{"id":"fv-x","version":1,"capacityBytes":-1}`)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := decodeRecord("rec.json", id, data)
		if err != nil {
			return
		}
		if v.ID != id || v.Version != recordVersion {
			t.Fatalf("accepted a record of %q version %d for %q", v.ID, v.Version, id)
		}
		again, err := encodeRecord(&v)
		if err != nil {
			t.Fatalf("accepted record does not encode: %v", err)
		}
		w, err := decodeRecord("rec.json", id, again)
		if err != nil {
			t.Fatalf("re-encoded record does not decode: %v\n%s", err, again)
		}
		if twice, _ := encodeRecord(&w); !bytes.Equal(twice, again) {
			t.Fatalf("record changes on a second round trip:\n%s\n%s", again, twice)
		}
	})
}

func FuzzDecodeSnapshotRecord(f *testing.F) {
	id := SnapshotID("snap-1")
	good, err := encodeSnapshot(&volume.Snapshot{Version: recordVersion, ID: id, Name: "snap-1", SourceVolumeID: VolumeID("pvc-1"),
		SizeBytes: 1 << 30, CreatedAt: time.Unix(1, 0).UTC()})
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range [][]byte{good, nil, []byte("[]"), []byte(`{"version":1,"id":"` + VolumeID("x") + `"}`), good[:len(good)-1]} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := decodeSnapshotRecord("snap.json", id, data)
		if err != nil {
			return
		}
		if s.ID != id || s.Version != recordVersion {
			t.Fatalf("accepted a snapshot record of %q version %d for %q", s.ID, s.Version, id)
		}
	})
}
