package keywrap

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

var (
	keyA = []byte("3q2+7wABAgMEBQYHCAkKCwwNDg8QERITFBUWFxgZGhs=")
	keyB = []byte("b3RoZXIga2V5IG1hdGVyaWFsIG9mIGF0IGxlYXN0IDMyIGJ5dGVz")
)

func mustWrap(t *testing.T, material []byte) ([]byte, Wrapped) {
	t.Helper()
	dk, err := NewDataKey()
	if err != nil {
		t.Fatal(err)
	}
	name, err := NewKeyName()
	if err != nil {
		t.Fatal(err)
	}
	w, err := Wrap(material, name, dk)
	if err != nil {
		t.Fatal(err)
	}
	return dk, w
}

func TestWrapUnwrap(t *testing.T) {
	dk, w := mustWrap(t, keyA)
	got, err := Unwrap(keyA, w)
	if err != nil || !bytes.Equal(got, dk) {
		t.Fatalf("Unwrap = %x, %v; want the data key", got, err)
	}
	if _, err := Unwrap(keyB, w); !errors.Is(err, ErrWrongKey) {
		t.Errorf("Unwrap with another key: %v, want ErrWrongKey", err)
	}
	renamed := w
	renamed.KeyName = "another-name"
	if _, err := Unwrap(keyA, renamed); !errors.Is(err, ErrDamaged) {
		t.Errorf("Unwrap under another key name: %v, want ErrDamaged", err)
	}
	bad := w
	bad.Ciphertext = bytes.Clone(w.Ciphertext)
	bad.Ciphertext[3] ^= 1
	if _, err := Unwrap(keyA, bad); !errors.Is(err, ErrDamaged) {
		t.Errorf("Unwrap of a changed ciphertext: %v, want ErrDamaged", err)
	}
	bad = w
	bad.Version = 2
	if _, err := Unwrap(keyA, bad); err == nil || !strings.Contains(err.Error(), "version 2") {
		t.Errorf("Unwrap of another version: %v", err)
	}
	// Two wraps of one key under one Secret share nothing an observer
	// could match (salt, check, nonce, ciphertext all differ).
	w2, _ := Wrap(keyA, w.KeyName, dk)
	if bytes.Equal(w.Salt, w2.Salt) || w.Check == w2.Check || bytes.Equal(w.Ciphertext, w2.Ciphertext) {
		t.Error("two wraps of the same key look alike")
	}
}

// The record kept on disk holds neither the data key nor the Secret.
func TestWrappedHoldsNoKeyInClear(t *testing.T) {
	dk, w := mustWrap(t, keyA)
	b, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range [][]byte{dk, dk[:16], keyA, keyA[:16]} {
		if bytes.Contains(b, secret) {
			t.Fatalf("the record holds key bytes in clear: %s", b)
		}
	}
	if s := fmt.Sprintf("%v %+v %#v %s", Materials{Current: keyA}, Materials{Current: keyA}, Materials{Current: keyA}, Materials{Current: keyA}); strings.Contains(s, string(keyA[:8])) {
		t.Errorf("formatting shows the material: %s", s)
	}
}

func TestRotationRewrapsWithoutTheOldSecret(t *testing.T) {
	dk, w := mustWrap(t, keyA)
	rotating := Materials{Current: keyB, Previous: keyA}
	got, rewrapped, err := rotating.Open(w)
	if err != nil || !bytes.Equal(got, dk) || rewrapped == nil {
		t.Fatalf("Open during rotation = %x, %v, %v; want the data key and a rewrap", got, rewrapped, err)
	}
	// The old material gone from the Secret: the rewrapped key opens with
	// the new one alone, to the same data key (nothing re-encrypted).
	after := Materials{Current: keyB}
	got, again, err := after.Open(*rewrapped)
	if err != nil || again != nil || !bytes.Equal(got, dk) {
		t.Fatalf("Open after rotation = %x, %v, %v", got, again, err)
	}
	if _, _, err := after.Open(w); !errors.Is(err, ErrWrongKey) {
		t.Errorf("the old wrap with only the new key: %v, want ErrWrongKey", err)
	}
	if _, _, err := (Materials{Current: keyB, Previous: keyB}).Open(w); !errors.Is(err, ErrWrongKey) {
		t.Errorf("neither key: %v, want ErrWrongKey", err)
	}
}

func TestHostileMaterial(t *testing.T) {
	for name, secrets := range map[string]map[string]string{
		"missing":           {},
		"empty":             {SecretKey: ""},
		"short":             {SecretKey: "0123456789"},
		"one byte short":    {SecretKey: strings.Repeat("k", MinMaterial-1)},
		"overlong":          {SecretKey: strings.Repeat("k", MaxMaterial+1)},
		"not UTF-8":         {SecretKey: string(append(bytes.Repeat([]byte{'k'}, 40), 0xff, 0xfe))},
		"previous is short": {SecretKey: string(keyA), SecretPreviousKey: "short"},
	} {
		_, err := FromSecret(secrets)
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		for _, v := range secrets {
			if len(v) > 4 && strings.Contains(err.Error(), v) {
				t.Errorf("%s: the error shows the value: %v", name, err)
			}
		}
	}
	if _, err := FromSecret(map[string]string{SecretKey: string(keyA)}); err != nil {
		t.Errorf("a good key refused: %v", err)
	}
	if _, err := FromSecret(map[string]string{SecretKey: strings.Repeat("k", MinMaterial)}); err != nil {
		t.Errorf("a key of exactly %d bytes refused: %v", MinMaterial, err)
	}
	if _, err := Wrap([]byte("short"), "v", make([]byte, DataKeySize)); err == nil {
		t.Error("Wrap with short material succeeded")
	}
	if _, err := Wrap(keyA, "", make([]byte, DataKeySize)); err == nil {
		t.Error("Wrap without a key name succeeded")
	}
	if _, err := Wrap(keyA, "v", make([]byte, 32)); err == nil {
		t.Error("Wrap of a 32-byte data key succeeded")
	}
}
