package fscrypt

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/hostos/mount"
	"github.com/filevol/filevol/internal/testutil"
)

func newKey(t *testing.T) []byte {
	t.Helper()
	k := make([]byte, KeySize)
	rand.Read(k)
	return k
}

// encryptableFS makes an ext4 with the encrypt feature in a file, mounts
// it through a loop device, and returns the mount point and the image.
func encryptableFS(t *testing.T) (mnt, img string) {
	t.Helper()
	testutil.RequireRoot(t)
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		t.Skip("mkfs.ext4 is not installed (apt-get install e2fsprogs)")
	}
	dir := testutil.Scratch(t, "fscrypt")
	img = filepath.Join(dir, "ext4.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 64<<20); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-O", "encrypt", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4 -O encrypt: %v: %s", err, out)
	}
	mnt = filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	mountImage(t, img, mnt)
	return mnt, img
}

// mountImage attaches img and mounts it at mnt until unmountImage or the
// test's end.
func mountImage(t *testing.T, img, mnt string) {
	t.Helper()
	dev, err := loop.Attach(context.Background(), img, loop.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := mount.Mount(dev.Path, mnt, "ext4", nil); err != nil {
		loop.Detach(dev.Path)
		t.Fatal(err)
	}
	t.Cleanup(func() { unmountImage(t, mnt, dev.Path) })
}

func unmountImage(t *testing.T, mnt, dev string) {
	t.Helper()
	if err := mount.UnmountAll(mnt); err != nil {
		t.Error(err)
	}
	if err := loop.Detach(dev); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Logf("detach %s: %v", dev, err)
	}
}

func TestKeySizesAreCheckedBeforeTheKernel(t *testing.T) {
	for _, n := range []int{0, 1, 32, KeySize - 1, KeySize + 1, 4096} {
		if _, err := (OS{}).Add("/nonexistent", make([]byte, n)); !errors.Is(err, ErrKeySize) {
			t.Errorf("Add with a %d-byte key: %v, want ErrKeySize", n, err)
		}
	}
}

func TestEncryptedDirectoryOnExt4(t *testing.T) {
	mnt, img := encryptableFS(t)
	var k OS
	key := newKey(t)
	id, err := k.Add(mnt, key)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := k.Add(mnt, key); err != nil || again != id {
		t.Fatalf("adding the same key again: %s, %v; want %s", again, err, id)
	}
	if s, err := k.Status(mnt, id); err != nil || s != Present {
		t.Fatalf("Status after Add = %v, %v; want present", s, err)
	}

	secret, plain := filepath.Join(mnt, "secret"), filepath.Join(mnt, "plain")
	for _, d := range []string{secret, plain} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := k.SetPolicy(secret, id); err != nil {
		t.Fatal(err)
	}
	if err := k.SetPolicy(secret, id); err != nil {
		t.Errorf("SetPolicy again with the same key: %v", err)
	}
	if got, ok, err := k.Policy(secret); err != nil || !ok || got != id {
		t.Errorf("Policy(secret) = %s, %t, %v; want %s", got, ok, err, id)
	}
	if _, ok, err := k.Policy(plain); err != nil || ok {
		t.Errorf("Policy(plain) = %t, %v; want not encrypted", ok, err)
	}
	other, err := k.Add(mnt, newKey(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := k.SetPolicy(secret, other); !errors.Is(err, ErrOtherPolicy) {
		t.Errorf("SetPolicy under another key: %v, want ErrOtherPolicy", err)
	}

	// A marker written in clear and one written through the encrypted
	// directory: the image must hold the first (so the search can find
	// what is there) and not the second, nor the encrypted file's name.
	clearMarker := bytes.Repeat([]byte("FILEVOL-CLEAR-MARKER "), 4096)
	secretMarker := bytes.Repeat([]byte("FILEVOL-SECRET-MARKER "), 4096)
	const secretName = "filevol-secret-file-name.txt"
	if err := os.WriteFile(filepath.Join(plain, "f"), clearMarker, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(secret, secretName), secretMarker, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := k.SetPolicy(secret, id); err != nil {
		t.Errorf("SetPolicy on the non-empty directory it already covers: %v", err)
	}
	if err := k.SetPolicy(plain, id); !errors.Is(err, ErrNotEmpty) {
		t.Errorf("SetPolicy on a non-empty directory: %v, want ErrNotEmpty", err)
	}

	// A file held open keeps the key half-removed until it is closed.
	f, err := os.Open(filepath.Join(secret, secretName))
	if err != nil {
		t.Fatal(err)
	}
	if s, err := k.Remove(mnt, id); err != nil || s != IncompletelyRemoved {
		t.Errorf("Remove with a file open = %v, %v; want incompletely removed", s, err)
	}
	f.Close()
	if s, err := k.Remove(mnt, id); err != nil || s != Absent {
		t.Fatalf("Remove after the close = %v, %v; want absent", s, err)
	}
	if s, err := k.Status(mnt, id); err != nil || s != Absent {
		t.Errorf("Status after Remove = %v, %v; want absent", s, err)
	}
	if s, err := k.Remove(mnt, id); err != nil || s != Absent {
		t.Errorf("Remove of a key not there = %v, %v; want absent, no error", s, err)
	}

	// Without the key, even root sees ciphertext names and cannot read.
	names, err := os.ReadDir(secret)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 1 || names[0].Name() == secretName {
		t.Errorf("names without the key: %v; want one, not %q", names, secretName)
	} else if _, err := os.ReadFile(filepath.Join(secret, names[0].Name())); !errors.Is(err, unix.ENOKEY) {
		t.Errorf("reading without the key: %v, want ENOKEY", err)
	}

	if err := mount.UnmountAll(mnt); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(raw, clearMarker[:64]) {
		t.Fatal("the clear marker is not in the image: the search cannot find anything")
	}
	if bytes.Contains(raw, secretMarker[:22]) || bytes.Contains(raw, []byte(secretName)) {
		t.Error("the encrypted file's contents or name are in the image in clear")
	}

	// The same key opens it again after a remount: same identifier.
	mountImage(t, img, mnt)
	if again, err := k.Add(mnt, key); err != nil || again != id {
		t.Fatalf("the key added after a remount: %s, %v; want %s", again, err, id)
	}
	got, err := os.ReadFile(filepath.Join(secret, secretName))
	if err != nil || !bytes.Equal(got, secretMarker) {
		t.Errorf("reading with the key again: %d bytes, %v; want the marker", len(got), err)
	}
}

func TestFilesystemWithoutEncryption(t *testing.T) {
	testutil.RequireRoot(t)
	dir := testutil.Scratch(t, "fscrypt-tmpfs")
	if err := mount.Mount("tmpfs", dir, "tmpfs", []string{"size=1m"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mount.UnmountAll(dir) })
	var k OS
	if _, err := k.Add(dir, newKey(t)); !errors.Is(err, ErrNotSupported) {
		t.Errorf("Add on tmpfs: %v, want ErrNotSupported", err)
	}
	if err := k.SetPolicy(dir, KeyID{1}); !errors.Is(err, ErrNotSupported) {
		t.Errorf("SetPolicy on tmpfs: %v, want ErrNotSupported", err)
	}
}
