package pool

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The fuzz targets below hold the pool's validators and record decoders to
// their contract on any input (issue 5, hostile input): no panic; an ID
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
	for _, s := range []string{volumeID("pvc-1"), "", "fv-", "fv-../../etc/passwd", "fv-" + strings.Repeat("A", idHexLen),
		"fv-" + strings.Repeat("0", idHexLen-1) + "/", "fv-" + strings.Repeat("0", idHexLen) + "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if err := validID(id); err != nil {
			if !errors.Is(err, ErrInvalidID) {
				t.Fatalf("validID(%q) = %v, not ErrInvalidID", id, err)
			}
			return
		}
		pathSafe(t, "volume ID", id)
		if len(id) != idLen || !strings.HasPrefix(id, idPrefix) {
			t.Fatalf("accepted volume ID %q of the wrong shape", id)
		}
	})
}

func FuzzValidSnapshotID(f *testing.F) {
	for _, s := range []string{snapshotID("snap-1"), "", "fs-", volumeID("pvc-1"), "fs-../x", "fs-" + strings.Repeat("f", 100)} {
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
	for _, s := range []string{"pvc-3f1c", "", "a\x00b", "\xff\xfe", strings.Repeat("n", MaxNameLen+1), "../../etc"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if err := validName(name); err != nil {
			if !errors.Is(err, ErrInvalidID) {
				t.Fatalf("validName(%q) = %v, not ErrInvalidID", name, err)
			}
			return
		}
		if err := validID(volumeID(name)); err != nil {
			t.Fatalf("name %q hashes to an invalid ID: %v", name, err)
		}
	})
}

func FuzzDecodeRecord(f *testing.F) {
	id := volumeID("pvc-1")
	good, err := encodeRecord(&Volume{Version: recordVersion, ID: id, Name: "pvc-1", CapacityBytes: 1 << 30,
		FSType: "ext4", Provisioning: ProvisioningThin, Parameters: map[string]string{"k": "v"}, Node: "n1",
		ContentSource: &ContentSource{Kind: SourceSnapshot, ID: snapshotID("s")}, CreatedAt: time.Unix(1, 0).UTC()})
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
	id := snapshotID("snap-1")
	good, err := encodeSnapshot(&Snapshot{Version: recordVersion, ID: id, Name: "snap-1", SourceVolumeID: volumeID("pvc-1"),
		SizeBytes: 1 << 30, CreatedAt: time.Unix(1, 0).UTC()})
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range [][]byte{good, nil, []byte("[]"), []byte(`{"version":1,"id":"` + volumeID("x") + `"}`), good[:len(good)-1]} {
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
