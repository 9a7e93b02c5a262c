package cbt

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestCompareData(t *testing.T) {
	dir := t.TempDir()
	mk := func(name string, size int64, writes map[int64]byte) *os.File {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		for off, b := range writes {
			if _, err := f.WriteAt(slices.Repeat([]byte{b}, K), off); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.Truncate(size); err != nil {
			t.Fatal(err)
		}
		return f
	}
	base := mk("base", 8*K, map[int64]byte{0: 1, 2 * K: 2, 5 * K: 5})
	// Block 0 same, 2 rewritten with other bytes, 5 zeroed, 300 past the
	// base's end (grown), 260 written with zeros.
	target := mk("target", 512*K, map[int64]byte{0: 1, 2 * K: 9, 5 * K: 0, 300 * K: 7, 260 * K: 0})
	var got []Range
	add := func(r Range) error { got = append(got, r); return nil }
	all := []Range{{0, 512 * K}}
	if _, err := CompareData(context.Background(), base, target, 8*K, 512*K, all, 0, add); err != nil {
		t.Fatal(err)
	}
	want := []Range{rg(2, 1), rg(5, 1), rg(300, 1)}
	if !slices.Equal(got, want) {
		t.Errorf("CompareData = %v, want %v", got, want)
	}
	// From block 3 on, over candidates only: block 2 is not looked at.
	got = nil
	read, err := CompareData(context.Background(), base, target, 8*K, 512*K, []Range{rg(0, 6), rg(300, 1)}, 3*K, add)
	if err != nil {
		t.Fatal(err)
	}
	if want := []Range{rg(5, 1), rg(300, 1)}; !slices.Equal(got, want) {
		t.Errorf("CompareData from block 3 = %v, want %v", got, want)
	}
	if read > 16*K {
		t.Errorf("read %d bytes for 4 candidate blocks", read)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := CompareData(ctx, base, target, 8*K, 512*K, all, 0, add); err == nil {
		t.Error("a cancelled comparison went on")
	}
}
