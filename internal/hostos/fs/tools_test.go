package fs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// recorder is a Runner that records each command instead of running it.
type recorder struct {
	calls [][]string
	out   []byte
	err   error
}

func (r *recorder) Run(_ context.Context, program string, args ...string) ([]byte, error) {
	r.calls = append(r.calls, append([]string{program}, args...))
	return r.out, r.err
}

func TestFormatCommands(t *testing.T) {
	want := map[string]string{
		"ext4":  "mkfs.ext4 -F -q -m 0 -E lazy_itable_init=1,lazy_journal_init=1,nodiscard /dev/loop9",
		"xfs":   "mkfs.xfs -f -q -K /dev/loop9",
		"btrfs": "mkfs.btrfs -f -q -K /dev/loop9",
	}
	if len(want) != len(Types) {
		t.Fatalf("Types = %v; every type needs a tested command", Types)
	}
	for _, typ := range Types {
		r := &recorder{}
		if err := (Tools{R: r}).Format(context.Background(), "/dev/loop9", typ); err != nil {
			t.Fatal(err)
		}
		if len(r.calls) != 1 || strings.Join(r.calls[0], " ") != want[typ] {
			t.Errorf("Format %s ran %q, want %q", typ, r.calls, want[typ])
		}
		if MinSize[typ] <= 0 {
			t.Errorf("no MinSize for %s", typ)
		}
	}
	r := &recorder{}
	if err := (Tools{R: r}).Format(context.Background(), "/dev/loop9", "ext3"); !errors.Is(err, ErrUnsupported) {
		t.Errorf("Format ext3 = %v, want ErrUnsupported", err)
	}
	r.err = &ExitError{Program: "mkfs.xfs", Code: 1, Stderr: "too small"}
	err := (Tools{R: r}).Format(context.Background(), "/dev/loop9", "xfs")
	var exitErr *ExitError
	if !errors.As(err, &exitErr) || !strings.Contains(err.Error(), "too small") {
		t.Errorf("Format failure = %v, want the ExitError wrapped", err)
	}
}

// An encrypted volume's ext4 gets the encrypt feature and nothing else
// changes; the other types have no fscrypt and are refused before mkfs.
func TestFormatEncrypt(t *testing.T) {
	r := &recorder{}
	if err := (Tools{R: r}).Format(context.Background(), "/dev/loop9", "ext4", FormatOptions{Encrypt: true}); err != nil {
		t.Fatal(err)
	}
	want := "mkfs.ext4 -F -q -m 0 -E lazy_itable_init=1,lazy_journal_init=1,nodiscard -O encrypt /dev/loop9"
	if len(r.calls) != 1 || strings.Join(r.calls[0], " ") != want {
		t.Errorf("Format ext4 encrypted ran %q, want %q", r.calls, want)
	}
	for _, typ := range []string{"xfs", "btrfs"} {
		r := &recorder{}
		err := (Tools{R: r}).Format(context.Background(), "/dev/loop9", typ, FormatOptions{Encrypt: true})
		if !errors.Is(err, ErrUnsupported) || len(r.calls) != 0 {
			t.Errorf("Format %s encrypted = %v after %q, want ErrUnsupported and no mkfs", typ, err, r.calls)
		}
	}
}

func TestGrowCommands(t *testing.T) {
	// "/" is always the root of a mount, so the mount point check passes;
	// the recorder runs nothing.
	want := map[string][]string{
		"ext4":  {"resize2fs", "/dev/loop9"},
		"xfs":   {"xfs_growfs", "-d", "/"},
		"btrfs": {"btrfs", "filesystem", "resize", "max", "/"},
	}
	for typ, argv := range want {
		r := &recorder{}
		if err := (Tools{R: r}).Grow(context.Background(), "/dev/loop9", "/", typ); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(r.calls, [][]string{argv}) {
			t.Errorf("Grow %s ran %q, want %q", typ, r.calls, argv)
		}
	}
	r := &recorder{}
	if err := (Tools{R: r}).Grow(context.Background(), "/dev/loop9", "/", "vfat"); !errors.Is(err, ErrUnsupported) {
		t.Errorf("Grow vfat = %v, want ErrUnsupported", err)
	}
	// An unmounted staging directory: growing "it" would grow the
	// filesystem below, so nothing may run.
	dir := t.TempDir()
	for _, typ := range []string{"xfs", "btrfs"} {
		if err := (Tools{R: r}).Grow(context.Background(), "/dev/loop9", dir, typ); !errors.Is(err, ErrNotMountPoint) {
			t.Errorf("Grow %s on a plain directory = %v, want ErrNotMountPoint", typ, err)
		}
	}
	if len(r.calls) != 0 {
		t.Errorf("ran %q", r.calls)
	}
}

func TestProbeNeedsBlockDevice(t *testing.T) {
	file := filepath.Join(t.TempDir(), "img")
	if err := os.WriteFile(file, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	// blkid says "nothing found" (exit 2) for a device it cannot open,
	// which must never read as "blank, format it".
	r := &recorder{err: &ExitError{Program: "blkid", Code: 2}}
	for _, dev := range []string{file, file + ".missing", "/dev/null"} {
		if typ, err := (Tools{R: r}).Probe(context.Background(), dev); err == nil {
			t.Errorf("Probe(%s) = %q, nil; want an error", dev, typ)
		}
	}
	if len(r.calls) != 0 {
		t.Errorf("ran %q", r.calls)
	}
}

func TestParseExport(t *testing.T) {
	got := parseExport([]byte("DEVNAME=/dev/loop1\nTYPE=ext4\nPTTYPE=\nodd line\n"))
	want := map[string]string{"DEVNAME": "/dev/loop1", "TYPE": "ext4", "PTTYPE": ""}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parseExport = %v, want %v", got, want)
	}
}
