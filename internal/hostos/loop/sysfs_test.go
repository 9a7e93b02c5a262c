package loop_test

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/testutil"
)

// scratchName is this package's directory under /tmp/filevol-test.
const scratchName = "hostos-loop"

func TestParseBackingFile(t *testing.T) {
	tests := []struct {
		raw         string
		wantPath    string
		wantDeleted bool
	}{
		{"/pool/v1.img\n", "/pool/v1.img", false},
		{"/pool/v1.img", "/pool/v1.img", false},
		{"/pool/v1.img (deleted)\n", "/pool/v1.img", true},
		{"/pool/v1.img (deleted)", "/pool/v1.img", true},
		{"/pool/a b.img\n", "/pool/a b.img", false},
		{"/pool/x (deleted) (deleted)\n", "/pool/x (deleted)", true},
		{"/pool/nl\n\n", "/pool/nl\n", false}, // only sysfs's own newline goes
		{"\n", "", false},
	}
	for _, tt := range tests {
		path, deleted := loop.ParseBackingFile(tt.raw)
		if path != tt.wantPath || deleted != tt.wantDeleted {
			t.Errorf("ParseBackingFile(%q) = %q, %v; want %q, %v", tt.raw, path, deleted, tt.wantPath, tt.wantDeleted)
		}
	}
}

// TestScanFakeSysfs parses a hand-made /sys/block tree: attached and
// unattached devices, a deleted backing file, names that are not loop
// devices, numeric (not lexical) order.
func TestScanFakeSysfs(t *testing.T) {
	dir := testutil.Scratch(t, scratchName)
	type dev struct{ backing, ro, dio, size, devnum string }
	tree := map[string]dev{
		"loop10":  {"/pool/b.img\n", "1\n", "0\n", "2048\n", "7:10\n"},
		"loop3":   {"/pool/a.img (deleted)\n", "0\n", "1\n", "8\n", "7:3\n"},
		"loop4":   {}, // exists, not attached
		"loop0p1": {"/pool/part\n", "0\n", "0\n", "1\n", "259:0\n"},
		"loopx":   {"/pool/x\n", "0\n", "0\n", "1\n", "7:99\n"},
		"vda":     {"/pool/vda\n", "0\n", "0\n", "1\n", "254:0\n"},
	}
	for name, d := range tree {
		base := filepath.Join(dir, name)
		write := func(rel, content string) {
			if content == "" {
				return
			}
			p := filepath.Join(base, rel)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.MkdirAll(base, 0o755); err != nil {
			t.Fatal(err)
		}
		write("loop/backing_file", d.backing)
		write("ro", d.ro)
		write("loop/dio", d.dio)
		write("size", d.size)
		write("dev", d.devnum)
	}
	got, err := loop.Scan(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []loop.Device{
		{Path: "/dev/loop3", Number: 3, BackingFile: "/pool/a.img", Deleted: true, DirectIO: true, SizeBytes: 8 * 512, Major: 7, Minor: 3},
		{Path: "/dev/loop10", Number: 10, BackingFile: "/pool/b.img", ReadOnly: true, SizeBytes: 2048 * 512, Major: 7, Minor: 10},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Scan:\n got %+v\nwant %+v", got, want)
	}
}

func TestScanMalformed(t *testing.T) {
	dir := testutil.Scratch(t, scratchName)
	base := filepath.Join(dir, "loop1")
	if err := os.MkdirAll(filepath.Join(base, "loop"), 0o755); err != nil {
		t.Fatal(err)
	}
	for rel, content := range map[string]string{
		"loop/backing_file": "/pool/a\n", "ro": "maybe\n", "loop/dio": "0\n", "size": "1\n", "dev": "7:1\n",
	} {
		if err := os.WriteFile(filepath.Join(base, rel), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := loop.Scan(dir); err == nil {
		t.Error("Scan with ro=maybe: want an error")
	}
}

// TestIndexFakeSysfs: the index finds devices by the backing file's base
// name and re-reads each candidate: a device whose backing file changed
// after the pass is returned for its new file only if the pass saw that
// name, and never for its old one.
func TestIndexFakeSysfs(t *testing.T) {
	dir := testutil.Scratch(t, scratchName)
	dev := func(name, backing string) {
		base := filepath.Join(dir, name)
		for rel, content := range map[string]string{
			"loop/backing_file": backing, "ro": "0\n", "loop/dio": "1\n", "size": "8\n", "dev": "7:" + name[4:] + "\n",
		} {
			if err := os.MkdirAll(filepath.Dir(filepath.Join(base, rel)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(base, rel), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	dev("loop1", "/pool/a.img\n")
	dev("loop2", "/pool/b.img\n")
	dev("loop7", "/other/a.img (deleted)\n")
	ix, err := loop.ReadIndexAt(dir)
	if err != nil {
		t.Fatal(err)
	}
	if ix.Len() != 3 {
		t.Errorf("Len = %d, want 3", ix.Len())
	}
	paths := func(devs []loop.Device) []string {
		var out []string
		for _, d := range devs {
			out = append(out, d.Path)
		}
		return out
	}
	if got, err := ix.Find("/pool/a.img"); err != nil || !reflect.DeepEqual(paths(got), []string{"/dev/loop1"}) {
		t.Errorf("Find(/pool/a.img) = %v, %v; want loop1 only", paths(got), err)
	}
	if got, err := ix.Find("/other/a.img"); err != nil || !reflect.DeepEqual(paths(got), []string{"/dev/loop7"}) || !got[0].Deleted {
		t.Errorf("Find(/other/a.img) = %+v, %v; want loop7, deleted", got, err)
	}
	// loop2 is re-attached to a.img after the pass.
	if err := os.WriteFile(filepath.Join(dir, "loop2/loop/backing_file"), []byte("/pool/a.img\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := ix.Find("/pool/b.img"); err != nil || len(got) != 0 {
		t.Errorf("Find(/pool/b.img) after its device changed file = %v, %v; want nothing", paths(got), err)
	}
	if got, err := ix.Find("/pool/a.img"); err != nil || !reflect.DeepEqual(paths(got), []string{"/dev/loop1"}) {
		t.Errorf("Find(/pool/a.img) = %v, %v; want loop1 (loop2 was b.img's in the pass)", paths(got), err)
	}
	// A device removed after the pass is skipped, not an error.
	if err := os.RemoveAll(filepath.Join(dir, "loop1")); err != nil {
		t.Fatal(err)
	}
	if got, err := ix.Find("/pool/a.img"); err != nil || len(got) != 0 {
		t.Errorf("Find(/pool/a.img) after loop1 went = %v, %v; want nothing", paths(got), err)
	}
}
