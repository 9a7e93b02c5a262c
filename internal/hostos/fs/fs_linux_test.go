package fs

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/hostos/mount"
)

func TestProbeAndFormat(t *testing.T) {
	for _, typ := range Types {
		t.Run(typ, func(t *testing.T) {
			needFS(t, typ)
			dir := scratch(t)
			dev, _ := newDevice(t, dir, 512<<20)
			ctx := context.Background()
			if got, err := tools.Probe(ctx, dev.Path); got != "" || err != nil {
				t.Fatalf("Probe(blank) = %q, %v; want \"\", nil", got, err)
			}
			start := time.Now()
			if err := tools.Format(ctx, dev.Path, typ); err != nil {
				t.Fatal(err)
			}
			t.Logf("mkfs %s on 512 MiB: %v", typ, time.Since(start))
			if got, err := tools.Probe(ctx, dev.Path); got != typ || err != nil {
				t.Fatalf("Probe(after mkfs) = %q, %v; want %q", got, err, typ)
			}
			target := mountDev(t, dev.Path, dir, typ)
			if err := os.WriteFile(filepath.Join(target, "f"), []byte("data"), 0o644); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestProbePartitionTable(t *testing.T) {
	needTool(t, "blkid")
	dir := scratch(t)
	dev, _ := newDevice(t, dir, 64<<20)
	// A minimal MBR: one Linux partition and the boot signature. A device
	// holding only a partition table must not read as blank.
	mbr := make([]byte, 512)
	entry := mbr[446:462]
	entry[4] = 0x83
	binary.LittleEndian.PutUint32(entry[8:], 2048)
	binary.LittleEndian.PutUint32(entry[12:], 65536)
	mbr[510], mbr[511] = 0x55, 0xAA
	f, err := os.OpenFile(dev.Path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(mbr, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if got, err := tools.Probe(context.Background(), dev.Path); got != "dos" || err != nil {
		t.Errorf("Probe(MBR) = %q, %v; want \"dos\"", got, err)
	}
}

func TestGrow(t *testing.T) {
	for _, typ := range Types {
		t.Run(typ, func(t *testing.T) {
			needFS(t, typ)
			dir := scratch(t)
			dev, img := newDevice(t, dir, 512<<20)
			ctx := context.Background()
			if err := tools.Format(ctx, dev.Path, typ); err != nil {
				t.Fatal(err)
			}
			if typ == "ext4" && !hasCapSysResource() {
				growExt4Offline(t, dev.Path, img, dir)
				t.Skip("online ext4 resize needs CAP_SYS_RESOURCE, which this test lacks; grew it offline instead")
			}
			target := mountDev(t, dev.Path, dir, typ)
			before, err := StatFS(target)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(img, 1<<30); err != nil {
				t.Fatal(err)
			}
			if _, err := loop.SetCapacity(dev.Path); err != nil {
				t.Fatal(err)
			}
			if size, err := BlockDeviceSize(dev.Path); size != 1<<30 || err != nil {
				t.Fatalf("BlockDeviceSize = %d, %v; want 1 GiB", size, err)
			}
			if err := tools.Grow(ctx, dev.Path, target, typ); err != nil {
				t.Fatal(err)
			}
			after, err := StatFS(target)
			if err != nil {
				t.Fatal(err)
			}
			if after.TotalBytes < before.TotalBytes+400<<20 {
				t.Errorf("total %d → %d bytes, want about 512 MiB more", before.TotalBytes, after.TotalBytes)
			}
			// Growing to the size it already has is not an error (a
			// retried NodeExpandVolume).
			if err := tools.Grow(ctx, dev.Path, target, typ); err != nil {
				t.Errorf("second Grow: %v", err)
			}
		})
	}
}

// growExt4Offline checks that an online grow without CAP_SYS_RESOURCE says
// so, then grows the unmounted ext4 (resize2fs needs no capability for
// that), which at least checks the command line and the size change.
func growExt4Offline(t *testing.T, dev, img, dir string) {
	t.Helper()
	if err := os.Truncate(img, 1<<30); err != nil {
		t.Fatal(err)
	}
	if _, err := loop.SetCapacity(dev); err != nil {
		t.Fatal(err)
	}
	target := mountDev(t, dev, dir, "ext4")
	err := tools.Grow(context.Background(), dev, target, "ext4")
	if err == nil || !strings.Contains(err.Error(), "CAP_SYS_RESOURCE") {
		t.Errorf("online Grow without CAP_SYS_RESOURCE = %v, want an error naming it", err)
	}
	if err := mount.Unmount(target); err != nil {
		t.Fatal(err)
	}
	// Unmounted, resize2fs wants a fresh fsck before it resizes.
	if _, err := run(context.Background(), "e2fsck", "-f", "-p", dev); err != nil {
		t.Fatal(err)
	}
	if err := tools.Grow(context.Background(), dev, "", "ext4"); err != nil {
		t.Fatal(err)
	}
	out, err := run(context.Background(), "dumpe2fs", "-h", dev)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "Block count:              262144\n") {
		t.Errorf("after offline grow to 1 GiB, dumpe2fs says:\n%s", out)
	}
}

func TestStatFS(t *testing.T) {
	needFS(t, "ext4")
	dir := scratch(t)
	dev, _ := newDevice(t, dir, 256<<20)
	if err := tools.Format(context.Background(), dev.Path, "ext4"); err != nil {
		t.Fatal(err)
	}
	target := mountDev(t, dev.Path, dir, "ext4")
	before, err := StatFS(target)
	if err != nil {
		t.Fatal(err)
	}
	// -m 0: nothing is reserved for root. ext4 still holds back its own
	// small pool (s_resv_clusters: 2% or 4096 clusters, the smaller) from
	// available, so used + available is just short of total.
	gap := before.TotalBytes - before.UsedBytes - before.AvailableBytes
	if gap < 0 || gap > before.TotalBytes/50+1<<20 || before.TotalBytes < 200<<20 {
		t.Errorf("stats = %+v", before)
	}
	if before.TotalInodes == 0 || before.UsedInodes+before.FreeInodes != before.TotalInodes {
		t.Errorf("inode stats = %+v", before)
	}
	f, err := os.Create(filepath.Join(target, "data"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(make([]byte, 8<<20)); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	unix.Sync()
	after, err := StatFS(target)
	if err != nil {
		t.Fatal(err)
	}
	if after.UsedBytes < before.UsedBytes+8<<20 || after.UsedInodes != before.UsedInodes+1 {
		t.Errorf("after an 8 MiB file: %+v, before %+v", after, before)
	}
	if _, err := StatFS(filepath.Join(dir, "missing")); err == nil {
		t.Error("StatFS of a missing path succeeded")
	}
}

func TestBlockDeviceSizeErrors(t *testing.T) {
	dir := scratch(t)
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{file, file + ".missing"} {
		if size, err := BlockDeviceSize(p); err == nil {
			t.Errorf("BlockDeviceSize(%s) = %d, nil; want an error", p, size)
		}
	}
}

func TestFreezeThaw(t *testing.T) {
	needFS(t, "ext4")
	dir := scratch(t)
	dev, _ := newDevice(t, dir, 256<<20)
	if err := tools.Format(context.Background(), dev.Path, "ext4"); err != nil {
		t.Fatal(err)
	}
	target := mountDev(t, dev.Path, dir, "ext4")
	sub := filepath.Join(target, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	// A directory that is not a mount root is refused: FIFREEZE on it
	// would freeze the filesystem below (here only the test volume).
	if err := Freeze(sub); !errors.Is(err, ErrNotMountPoint) {
		t.Fatalf("Freeze(subdir) = %v, want ErrNotMountPoint", err)
	}

	if err := Freeze(target); err != nil {
		t.Fatal(err)
	}
	if err := Freeze(target); !errors.Is(err, unix.EBUSY) {
		t.Errorf("second Freeze = %v, want EBUSY", err)
	}
	done := make(chan error, 1)
	go func() { done <- os.WriteFile(filepath.Join(target, "f"), []byte("x"), 0o644) }()
	select {
	case err := <-done:
		t.Fatalf("write finished on a frozen filesystem: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := Thaw(target); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("write after thaw: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("write still blocked after thaw")
	}
	if err := Thaw(target); err != nil {
		t.Errorf("Thaw of a thawed filesystem = %v, want nil", err)
	}
}
