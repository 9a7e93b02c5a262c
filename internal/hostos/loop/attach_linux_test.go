package loop_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/hostos/loop"
)

func TestAttach(t *testing.T) {
	dir := setup(t)
	const size = 16 << 20
	tests := []struct {
		name string
		opts loop.Options
	}{
		{"rw", loop.Options{}},
		{"ro", loop.Options{ReadOnly: true}},
		{"rw-dio", loop.Options{DirectIO: true}},
		{"ro-dio", loop.Options{ReadOnly: true, DirectIO: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			img := newImage(t, dir, tt.name+".img", size)
			d := mustAttach(t, img, tt.opts)

			// The scratch directory is on ext4 here, which supports O_DIRECT.
			want := loop.Device{
				Path: d.Path, Number: d.Number, BackingFile: img,
				ReadOnly: tt.opts.ReadOnly, DirectIO: tt.opts.DirectIO,
				SizeBytes: size, Major: 7, Minor: d.Minor,
			}
			if d != want {
				t.Errorf("Attach = %+v\nwant     %+v", d, want)
			}
			if found := mustFind(t, img); len(found) != 1 || found[0] != d {
				t.Errorf("Find = %+v, want [%+v]", found, d)
			}

			data := bytes.Repeat([]byte("filevol!"), 512)
			err := writeDevice(d.Path, data)
			if tt.opts.ReadOnly {
				if !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EROFS) {
					t.Errorf("write to read-only device: err = %v, want EPERM or EROFS", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("write to %s: %v", d.Path, err)
			}
			got := make([]byte, len(data))
			f, err := os.Open(img)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, data) {
				t.Errorf("backing file does not hold what was written through %s (err %v)", d.Path, err)
			}
		})
	}
}

// TestAttachDirectIOFallback: ramfs cannot do O_DIRECT. Kernel 6.18 accepts
// LO_FLAGS_DIRECT_IO and uses buffered I/O; older ones return EINVAL and
// Attach retries without it. Either way Attach succeeds and reports the truth.
func TestAttachDirectIOFallback(t *testing.T) {
	dir := setup(t)
	mnt := mountTmp(t, dir, "ramfs", "ramfs")
	img := newImage(t, mnt, "v.img", 4<<20)
	d := mustAttach(t, img, loop.Options{DirectIO: true})
	if d.DirectIO {
		t.Errorf("DirectIO = true on ramfs, want false")
	}
}

func TestConfigureFallback(t *testing.T) {
	tests := []struct {
		name      string
		flags     uint32
		errs      []error // returned by successive configure calls
		wantCalls []uint32
		wantErr   error
	}{
		{"ok", unix.LO_FLAGS_DIRECT_IO, []error{nil}, []uint32{unix.LO_FLAGS_DIRECT_IO}, nil},
		{"dio refused", unix.LO_FLAGS_DIRECT_IO | unix.LO_FLAGS_READ_ONLY, []error{unix.EINVAL, nil},
			[]uint32{unix.LO_FLAGS_DIRECT_IO | unix.LO_FLAGS_READ_ONLY, unix.LO_FLAGS_READ_ONLY}, nil},
		{"still invalid", unix.LO_FLAGS_DIRECT_IO, []error{unix.EINVAL, unix.EINVAL},
			[]uint32{unix.LO_FLAGS_DIRECT_IO, 0}, unix.EINVAL},
		{"einval without dio", 0, []error{unix.EINVAL}, []uint32{0}, unix.EINVAL},
		{"busy is not retried here", unix.LO_FLAGS_DIRECT_IO, []error{unix.EBUSY},
			[]uint32{unix.LO_FLAGS_DIRECT_IO}, unix.EBUSY},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var calls []uint32
			cfg := unix.LoopConfig{}
			cfg.Info.Flags = tt.flags
			err := loop.ConfigureFallback(&cfg, func(c *unix.LoopConfig) error {
				calls = append(calls, c.Info.Flags)
				return tt.errs[len(calls)-1]
			})
			if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Errorf("err = %v, want %v", err, tt.wantErr)
			}
			if !slices.Equal(calls, tt.wantCalls) {
				t.Errorf("flags per call = %#x, want %#x", calls, tt.wantCalls)
			}
		})
	}
}

func TestAttachErrors(t *testing.T) {
	dir := setup(t)
	img := newImage(t, dir, "v.img", 1<<20)
	canceled, cancel := context.WithCancel(t.Context())
	cancel()

	if _, err := loop.Attach(t.Context(), filepath.Join(dir, "missing.img"), loop.Options{}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: err = %v, want fs.ErrNotExist", err)
	}
	if _, err := loop.Attach(canceled, img, loop.Options{}); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled context: err = %v, want context.Canceled", err)
	}
	if _, err := loop.Attach(t.Context(), dir, loop.Options{ReadOnly: true, DirectIO: true}); !errors.Is(err, unix.EINVAL) {
		t.Errorf("directory: err = %v, want EINVAL", err)
	}
	if devs := mustFind(t, img); len(devs) != 0 {
		t.Errorf("failed attaches left devices: %+v", devs)
	}
}

// TestAttachConcurrent races attaches so that LOOP_CTL_GET_FREE hands the
// same device to several of them; the losers must retry, not fail.
func TestAttachConcurrent(t *testing.T) {
	dir := setup(t)
	const n = 8
	img := newImage(t, dir, "v.img", 1<<20)
	var wg sync.WaitGroup
	devs := make([]loop.Device, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { devs[i], errs[i] = loop.Attach(t.Context(), img, loop.Options{}) })
	}
	wg.Wait()
	seen := map[string]bool{}
	for i := range n {
		if errs[i] != nil {
			t.Errorf("attach %d: %v", i, errs[i])
			continue
		}
		if seen[devs[i].Path] {
			t.Errorf("%s handed out twice", devs[i].Path)
		}
		seen[devs[i].Path] = true
		if err := loop.Detach(devs[i].Path); err != nil {
			t.Error(err)
		}
	}
}

func TestFindTwoDevicesOneFile(t *testing.T) {
	dir := setup(t)
	img := newImage(t, dir, "v.img", 1<<20)
	other := newImage(t, dir, "other.img", 1<<20)
	a := mustAttach(t, img, loop.Options{})
	mustAttach(t, other, loop.Options{})
	b := mustAttach(t, img, loop.Options{ReadOnly: true})

	lo, hi := a, b
	if b.Number < a.Number {
		lo, hi = b, a
	}
	// Unclean spellings of the same path, and a symlink to it.
	link := filepath.Join(dir, "link.img")
	if err := os.Symlink(img, link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{img, dir + "//./v.img", dir + "/sub/../v.img", link} {
		got := mustFind(t, p)
		if len(got) != 2 || got[0] != lo || got[1] != hi {
			t.Errorf("Find(%q) = %+v, want [%+v %+v]", p, got, lo, hi)
		}
	}
	all, err := loop.List()
	if err != nil {
		t.Fatal(err)
	}
	mine := 0
	for i, d := range all {
		if i > 0 && all[i-1].Number >= d.Number {
			t.Errorf("List not sorted: %d before %d", all[i-1].Number, d.Number)
		}
		if filepath.Dir(d.BackingFile) == dir {
			mine++
		}
	}
	if mine != 3 {
		t.Errorf("List shows %d of our 3 devices", mine)
	}
	if got := mustFind(t, filepath.Join(dir, "nothing.img")); len(got) != 0 {
		t.Errorf("Find(unattached) = %+v", got)
	}
}

func TestFindDeleted(t *testing.T) {
	dir := setup(t)
	img := newImage(t, dir, "v.img", 1<<20)
	d := mustAttach(t, img, loop.Options{})
	if err := os.Remove(img); err != nil {
		t.Fatal(err)
	}
	got := mustFind(t, img)
	if len(got) != 1 || got[0].Path != d.Path || !got[0].Deleted || got[0].BackingFile != img {
		t.Errorf("Find after unlink = %+v, want %s with Deleted and BackingFile %s", got, d.Path, img)
	}
}
