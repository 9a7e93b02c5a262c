package fs

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/hostos/mount"
)

// TestSize reads each filesystem's size from its superblock: the device's
// after mkfs, unchanged when only the device grows, the new size after the
// filesystem grew (offline for ext4, mounted for the others).
func TestSize(t *testing.T) {
	for _, typ := range Types {
		t.Run(typ, func(t *testing.T) {
			needFS(t, typ)
			dir := scratch(t)
			dev, img := newDevice(t, dir, 512<<20)
			ctx := context.Background()
			if err := tools.Format(ctx, dev.Path, typ); err != nil {
				t.Fatal(err)
			}
			size, err := Size(dev.Path, typ)
			if err != nil || size > 512<<20 || size < 500<<20 {
				t.Fatalf("Size after mkfs of 512 MiB = %d, %v", size, err)
			}
			if err := os.Truncate(img, 1<<30); err != nil {
				t.Fatal(err)
			}
			if _, err := loop.SetCapacity(dev.Path); err != nil {
				t.Fatal(err)
			}
			if again, err := Size(dev.Path, typ); err != nil || again != size {
				t.Errorf("Size after the device grew = %d, %v; want %d (the filesystem did not)", again, err, size)
			}
			if typ == "ext4" {
				if err := tools.GrowOffline(ctx, dev.Path, typ, false); err != nil {
					t.Fatal(err)
				}
			} else {
				target := mountDev(t, dev.Path, dir, typ)
				if err := tools.Grow(ctx, dev.Path, target, typ); err != nil {
					t.Fatal(err)
				}
				// A mounted xfs writes its superblock back later: what the
				// device holds is older until then (see Size), and certain
				// once unmounted.
				if err := mount.UnmountAll(target); err != nil {
					t.Fatal(err)
				}
			}
			if grown, err := Size(dev.Path, typ); err != nil || grown < 1000<<20 || grown > 1<<30 {
				t.Errorf("Size after growing to 1 GiB = %d, %v", grown, err)
			}
			other := map[string]string{"ext4": "xfs", "xfs": "btrfs", "btrfs": "ext4"}[typ]
			if _, err := Size(dev.Path, other); !errors.Is(err, ErrNoSuperblock) {
				t.Errorf("Size as %s of a %s = %v, want ErrNoSuperblock", other, typ, err)
			}
		})
	}
}

func TestGrowOfflineCommands(t *testing.T) {
	r := &recorder{err: &ExitError{Program: "e2fsck", Code: e2fsckCorrected}}
	if err := (Tools{R: r}).GrowOffline(context.Background(), "/dev/loop9", "ext4", false); err == nil {
		t.Error("GrowOffline with resize2fs failing (the recorder fails every call) = nil")
	}
	if len(r.calls) != 2 || strings.Join(r.calls[0], " ") != "e2fsck -f -p /dev/loop9" ||
		strings.Join(r.calls[1], " ") != "resize2fs /dev/loop9" {
		t.Errorf("GrowOffline ran %q; e2fsck exit 1 (errors corrected) must lead to resize2fs", r.calls)
	}
	r = &recorder{err: &ExitError{Program: "e2fsck", Code: 4}}
	if err := (Tools{R: r}).GrowOffline(context.Background(), "/dev/loop9", "ext4", false); err == nil || len(r.calls) != 1 {
		t.Errorf("GrowOffline after e2fsck exit 4 = %v, ran %q; want an error and no resize2fs", err, r.calls)
	}
	r = &recorder{out: []byte("/dev/loop9 is in use.\n"), err: &ExitError{Program: "e2fsck", Code: 8}}
	if err := (Tools{R: r}).GrowOffline(context.Background(), "/dev/loop9", "ext4", false); !errors.Is(err, ErrInUse) || len(r.calls) != 1 {
		t.Errorf("GrowOffline of a device in use = %v, ran %q; want ErrInUse and no resize2fs", err, r.calls)
	}
	// After an interrupted resize2fs: every repair.
	r = &recorder{}
	if err := (Tools{R: r}).GrowOffline(context.Background(), "/dev/loop9", "ext4", true); err != nil ||
		len(r.calls) != 2 || strings.Join(r.calls[0], " ") != "e2fsck -f -y /dev/loop9" {
		t.Errorf("GrowOffline repair = %v, ran %q", err, r.calls)
	}
	for _, typ := range []string{"xfs", "btrfs"} {
		if err := (Tools{R: &recorder{}}).GrowOffline(context.Background(), "/dev/loop9", typ, false); !errors.Is(err, ErrUnsupported) {
			t.Errorf("GrowOffline %s = %v, want ErrUnsupported (it grows only mounted)", typ, err)
		}
	}
}
