package marker

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

func TestOfFillsOneBlock(t *testing.T) {
	for _, text := range []string{"a", "before", "a-while-fenced-199", string(bytes.Repeat([]byte("x"), Size+10))} {
		if m := Of(text); len(m) != Size {
			t.Fatalf("Of(%.10q) is %d bytes, want %d", text, len(m), Size)
		}
	}
	// The tests' texts are far shorter than a block: each marker is its
	// own.
	if bytes.Equal(Of("a-after"), Of("a-after-heal")) || bytes.Equal(Of("b"), Of("b-first")) {
		t.Error("two texts give one marker")
	}
	if !bytes.HasPrefix(Of("b"), []byte("b|b|b|")) {
		t.Errorf("Of(\"b\") starts %q, want the text and '|' repeated", Of("b")[:8])
	}
}

// A marker written where another stood replaces it, and only at its own
// block; a file stands in for the device (O_DIRECT works on a file of a
// disk filesystem, not on tmpfs).
func TestWriteThenHolds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "img")
	if err := os.WriteFile(path, make([]byte, 4*Size), 0o600); err != nil {
		t.Fatal(err)
	}
	w := Write(path, Block(2), "first")
	if errors.Is(w.Write, unix.EINVAL) {
		t.Skipf("no O_DIRECT on %s: %v", path, w)
	}
	if !w.OK() || !Holds(t, path, Block(2), "first") {
		t.Fatalf("write of the first marker: %v, or not in the file", w)
	}
	if w := Write(path, Block(2), "second"); !w.OK() || !Holds(t, path, Block(2), "second") || Holds(t, path, Block(2), "first") {
		t.Fatalf("write of the second marker over the first: %v", w)
	}
	if Holds(t, path, Block(1), "second") || Holds(t, path, Block(3), "second") {
		t.Error("a marker reached a block beside its own")
	}
	if w := <-WriteAsync(path, Block(0), "async"); !w.OK() || !Holds(t, path, 0, "async") {
		t.Errorf("WriteAsync: %v, or its marker not in the file", w)
	}
}

func TestWriteToNoDevice(t *testing.T) {
	w := Write(filepath.Join(t.TempDir(), "missing"), 0, "x")
	if !errors.Is(w.Write, unix.ENOENT) || w.Sync != nil || w.OK() {
		t.Errorf("write to a missing device: %v, want pwrite ENOENT and no fsync", w)
	}
	if got, want := w.String()[:len("pwrite: ENOENT, fsync: ok")], "pwrite: ENOENT, fsync: ok"; got != want {
		t.Errorf("String() = %q, want it to start %q", w.String(), want)
	}
}

func TestAlignedForODirect(t *testing.T) {
	for range 8 {
		b := aligned(Size)
		if addr := uintptr(unsafe.Pointer(&b[0])); len(b) != Size || addr%Size != 0 {
			t.Fatalf("aligned(%d): %d bytes at %#x", Size, len(b), addr)
		}
	}
}
