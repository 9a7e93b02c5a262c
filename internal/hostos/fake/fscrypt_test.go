package fake

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/filevol/filevol/internal/hostos/fscrypt"
)

// The fake keeps the rules fscrypt_linux_test.go shows the kernel keeps.
func TestKeysFollowTheKernelsRules(t *testing.T) {
	k := NewKeys()
	mnt := t.TempDir()
	key := bytes.Repeat([]byte{7}, fscrypt.KeySize)
	if _, err := k.Add(mnt, key); !errors.Is(err, fscrypt.ErrNotSupported) {
		t.Fatalf("Add before Encryptable: %v, want ErrNotSupported", err)
	}
	k.Encryptable(mnt)
	if _, err := k.Add(mnt, key[:32]); !errors.Is(err, fscrypt.ErrKeySize) {
		t.Errorf("Add of a short key: %v, want ErrKeySize", err)
	}
	id, err := k.Add(mnt, key)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := k.Add(mnt, key); again != id {
		t.Errorf("the same key has two identifiers: %s, %s", id, again)
	}
	other, _ := k.Add(mnt, bytes.Repeat([]byte{8}, fscrypt.KeySize))
	if other == id {
		t.Error("two keys have one identifier")
	}
	dir, full := filepath.Join(mnt, "d"), filepath.Join(mnt, "full")
	os.Mkdir(dir, 0o755)
	os.Mkdir(full, 0o755)
	os.WriteFile(filepath.Join(full, "f"), nil, 0o644)
	if err := k.SetPolicy(full, id); !errors.Is(err, fscrypt.ErrNotEmpty) {
		t.Errorf("SetPolicy on a non-empty directory: %v", err)
	}
	if err := k.SetPolicy(dir, id); err != nil {
		t.Fatal(err)
	}
	if err := k.SetPolicy(dir, id); err != nil {
		t.Errorf("SetPolicy again with its key: %v", err)
	}
	if err := k.SetPolicy(dir, other); !errors.Is(err, fscrypt.ErrOtherPolicy) {
		t.Errorf("SetPolicy under another key: %v", err)
	}
	if got, ok, _ := k.Policy(dir); !ok || got != id {
		t.Errorf("Policy = %s, %t", got, ok)
	}
	release := k.HoldOpen(id)
	if s, _ := k.Remove(mnt, id); s != fscrypt.IncompletelyRemoved {
		t.Errorf("Remove with a file open: %v", s)
	}
	if s, _ := k.Status(mnt, id); s != fscrypt.IncompletelyRemoved {
		t.Errorf("Status with a file open after Remove: %v", s)
	}
	release()
	if s, _ := k.Remove(mnt, id); s != fscrypt.Absent {
		t.Errorf("Remove after the release: %v", s)
	}
	if s, _ := k.Status(mnt, id); s != fscrypt.Absent {
		t.Errorf("Status after Remove: %v", s)
	}
	sub := filepath.Join(mnt, "e")
	os.Mkdir(sub, 0o755)
	if err := k.SetPolicy(sub, id); err == nil {
		t.Error("SetPolicy with its key removed succeeded")
	}
}
