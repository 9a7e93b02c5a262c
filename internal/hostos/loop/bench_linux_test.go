package loop_test

import (
	"fmt"
	"testing"

	"github.com/filevol/filevol/internal/hostos/loop"
)

// BenchmarkAttachDetach measures one block-volume stage/unstage cycle of
// the loop layer: GET_FREE, LOOP_CONFIGURE with direct I/O, sysfs read
// back, O_EXCL open, LOOP_CLR_FD.
func BenchmarkAttachDetach(b *testing.B) {
	dir := setup(b)
	img := newImage(b, dir, "v.img", 64<<20)
	for b.Loop() {
		d, err := loop.Attach(b.Context(), img, loop.Options{DirectIO: true})
		if err != nil {
			b.Fatal(err)
		}
		if err := loop.Detach(d.Path); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFind measures the sysfs lookup NodeStage does first, with 20
// devices attached (plus whatever else the machine has).
func BenchmarkFind(b *testing.B) {
	dir := setup(b)
	const n = 20
	imgs := make([]string, n)
	for i := range imgs {
		imgs[i] = newImage(b, dir, fmt.Sprintf("v%02d.img", i), 1<<20)
		mustAttach(b, imgs[i], loop.Options{})
	}
	i := 0
	for b.Loop() {
		devs, err := loop.Find(imgs[i%n])
		if err != nil || len(devs) != 1 {
			b.Fatalf("Find: %v %v", devs, err)
		}
		i++
	}
}

// BenchmarkList is Find without the filter, for comparison.
func BenchmarkList(b *testing.B) {
	dir := setup(b)
	for i := range 20 {
		mustAttach(b, newImage(b, dir, fmt.Sprintf("v%02d.img", i), 1<<20), loop.Options{})
	}
	for b.Loop() {
		if _, err := loop.List(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFirstStageLookup compares the two ways a first stage can learn
// that no device holds an image, on whatever devices the host has (the
// figure grows with them for find, not for locked): "find" reads every
// loop device's backing file, "locked" is one open and F_OFD_GETLK.
func BenchmarkFirstStageLookup(b *testing.B) {
	dir := setup(b)
	img := newImage(b, dir, "unattached.img", 1<<20)
	devs, err := loop.List()
	if err != nil {
		b.Fatal(err)
	}
	b.Run("find", func(b *testing.B) {
		for b.Loop() {
			if devs, err := loop.Find(img); err != nil || len(devs) != 0 {
				b.Fatalf("Find: %v %v", devs, err)
			}
		}
		b.ReportMetric(float64(len(devs)), "devices")
	})
	b.Run("locked", func(b *testing.B) {
		for b.Loop() {
			if l, err := loop.Locked(img); err != nil || l {
				b.Fatalf("Locked: %v %v", l, err)
			}
		}
		b.ReportMetric(float64(len(devs)), "devices")
	})
}
