package pool

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/filevol/filevol/internal/keywrap"
	"github.com/filevol/filevol/internal/volume"
)

var testMaterial = []byte("c2VjcmV0IGtleSBtYXRlcmlhbCBvZiAzMiBieXRlcyBvciBtb3Jl")

func wrapNew(t *testing.T) (keywrap.Wrapped, []byte) {
	t.Helper()
	dk, err := keywrap.NewDataKey()
	if err != nil {
		t.Fatal(err)
	}
	name, err := keywrap.NewKeyName()
	if err != nil {
		t.Fatal(err)
	}
	w, err := keywrap.Wrap(testMaterial, name, dk)
	if err != nil {
		t.Fatal(err)
	}
	return w, dk
}

// The wrapped key is written durably into the record (a reopened pool
// reads it), once; another key in its place is refused.
func TestSetWrappedKey(t *testing.T) {
	dir := t.TempDir()
	p := openPool(t, dir, Options{})
	v := mustCreate(t, p, volume.CreateRequest{Name: "enc", CapacityBytes: 8 << 20, FSType: "ext4", Encryption: volume.EncryptionFscrypt})
	if !v.Encrypted() || v.Encryption.Wrapped != nil {
		t.Fatalf("a new encrypted volume: %+v, want encrypted without a key yet", v.Encryption)
	}
	w, dk := wrapNew(t)
	if _, err := p.SetWrappedKey(v.ID, w); err != nil {
		t.Fatal(err)
	}
	rec, err := os.ReadFile(filepath.Join(dir, "volumes", v.ID+".json"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(rec, dk) || bytes.Contains(rec, testMaterial) || !strings.Contains(string(rec), w.KeyName) {
		t.Fatalf("record %s: want the wrapped key's name and no key in clear", rec)
	}
	if _, err := p.SetWrappedKey(v.ID, w); err != nil {
		t.Errorf("the same key again: %v", err)
	}
	other, _ := wrapNew(t)
	if _, err := p.SetWrappedKey(v.ID, other); err == nil {
		t.Error("another data key replaced the recorded one")
	}
	rewrapped, err := keywrap.Wrap(testMaterial, w.KeyName, dk)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.SetWrappedKey(v.ID, rewrapped); err != nil {
		t.Errorf("a rewrap of the same key: %v", err)
	}
	plain := mustCreate(t, p, volume.CreateRequest{Name: "plain", CapacityBytes: 8 << 20, FSType: "ext4"})
	if _, err := p.SetWrappedKey(plain.ID, w); !errors.Is(err, volume.ErrInvalidArgument) {
		t.Errorf("a key for a volume that is not encrypted: %v, want ErrInvalidArgument", err)
	}
	if _, err := p.Create(context.Background(), volume.CreateRequest{Name: "luks", CapacityBytes: 8 << 20, Encryption: "luks"}); !errors.Is(err, volume.ErrInvalidArgument) {
		t.Errorf("an unknown scheme: %v, want ErrInvalidArgument", err)
	}
	p.Close()
	p2 := openPool(t, dir, Options{})
	got, err := p2.Get(v.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Encryption == nil || got.Encryption.Wrapped == nil || !reflect.DeepEqual(*got.Encryption.Wrapped, rewrapped) {
		t.Errorf("after reopening: %+v, want the rewrapped key", got.Encryption)
	}
}

// Snapshots, restores and clones carry their source's key under its
// name; an encrypted source never becomes a volume in clear, nor the
// reverse.
func TestEncryptionFollowsTheData(t *testing.T) {
	p := openPool(t, t.TempDir(), Options{})
	ctx := context.Background()
	v := mustUse(t, p, mustCreate(t, p, volume.CreateRequest{Name: "enc", CapacityBytes: 8 << 20, FSType: "ext4", Encryption: volume.EncryptionFscrypt}))
	w, dk := wrapNew(t)
	if _, err := p.SetWrappedKey(v.ID, w); err != nil {
		t.Fatal(err)
	}
	s, err := p.CreateSnapshot(ctx, volume.SnapshotRequest{Name: "snap", SourceVolumeID: v.ID})
	if err != nil {
		t.Fatal(err)
	}
	if s.Encryption == nil || s.Encryption.Wrapped == nil || s.Encryption.Wrapped.KeyName != w.KeyName {
		t.Fatalf("snapshot's encryption %+v, want the source's key", s.Encryption)
	}
	for _, src := range []volume.ContentSource{{Kind: volume.SourceSnapshot, ID: s.ID}, {Kind: volume.SourceVolume, ID: v.ID}} {
		r, err := p.Create(ctx, volume.CreateRequest{Name: "from-" + src.Kind, CapacityBytes: 8 << 20, FSType: "ext4", Source: &src, Encryption: volume.EncryptionFscrypt})
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := keywrap.Materials{Current: testMaterial}.Open(*r.Encryption.Wrapped)
		if err != nil || !bytes.Equal(got, dk) {
			t.Errorf("%s: the copy's key does not open to the source's: %v", src.Kind, err)
		}
		if _, err := p.Create(ctx, volume.CreateRequest{Name: "clear-" + src.Kind, CapacityBytes: 8 << 20, FSType: "ext4", Source: &src}); !errors.Is(err, volume.ErrInvalidArgument) {
			t.Errorf("%s of an encrypted source in clear: %v, want ErrInvalidArgument", src.Kind, err)
		}
	}
	plain := mustUse(t, p, mustCreate(t, p, volume.CreateRequest{Name: "plain", CapacityBytes: 8 << 20, FSType: "ext4"}))
	src := volume.ContentSource{Kind: volume.SourceVolume, ID: plain.ID}
	if _, err := p.Create(ctx, volume.CreateRequest{Name: "enc-of-plain", CapacityBytes: 8 << 20, FSType: "ext4", Source: &src, Encryption: volume.EncryptionFscrypt}); !errors.Is(err, volume.ErrInvalidArgument) {
		t.Errorf("an encrypted clone of a clear volume: %v, want ErrInvalidArgument", err)
	}
	if len(p.List()) != 4 {
		t.Errorf("the refused creates left volumes: %d", len(p.List()))
	}
}
