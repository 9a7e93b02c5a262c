package csi

import (
	"context"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/filevol/filevol/internal/hostos/fscrypt"
	"github.com/filevol/filevol/internal/keywrap"
	"github.com/filevol/filevol/internal/volume"
)

var (
	keyOld = strings.Repeat("0ld-k3y-material/", 3)
	keyNew = strings.Repeat("n3w-k3y-material+", 3)
)

// encrypted creates an encrypted volume (thin: its image is made at stage).
func (e *nodeEnv) encrypted(name string) string {
	e.t.Helper()
	v, err := e.pool.Create(context.Background(), volume.CreateRequest{Name: name, CapacityBytes: 64 << 20, FSType: "ext4", Encryption: volume.EncryptionFscrypt})
	if err != nil {
		e.t.Fatal(err)
	}
	return v.ID
}

func (e *nodeEnv) stageWith(id, staging string, c *csipb.VolumeCapability, secrets map[string]string) error {
	_, err := e.node.NodeStageVolume(context.Background(), &csipb.NodeStageVolumeRequest{
		VolumeId: id, StagingTargetPath: staging, VolumeCapability: c, Secrets: secrets})
	return err
}

func (e *nodeEnv) wrapped(id string) keywrap.Wrapped {
	e.t.Helper()
	v, err := e.pool.Get(id)
	if err != nil {
		e.t.Fatal(err)
	}
	if v.Encryption == nil || v.Encryption.Wrapped == nil {
		e.t.Fatalf("volume %s has no wrapped key: %+v", id, v.Encryption)
	}
	return *v.Encryption.Wrapped
}

func TestEncryptedVolumeOnTheNode(t *testing.T) {
	e := newNodeEnv(t)
	id := e.encrypted("a")
	staging, target := e.staging("a"), e.target("a")
	if err := e.stageWith(id, staging, capMount("", rw), map[string]string{keywrap.SecretKey: keyOld}); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(e.k.Log(), func(l string) bool { return strings.HasPrefix(l, "format ") && strings.HasSuffix(l, " ext4 encrypt") }) {
		t.Errorf("no encrypt-capable format in %q", e.k.Log())
	}
	w := e.wrapped(id)
	keys := e.k.Keys()
	kid, ok, err := keys.Policy(filepath.Join(staging, "data"))
	if err != nil || !ok {
		t.Fatalf("%s not encrypted: %v", filepath.Join(staging, "data"), err)
	}
	if st, _ := keys.Status(staging, kid); st != fscrypt.Present {
		t.Errorf("key %s after stage: %v", kid, st)
	}
	// A second stage is idempotent and finds the same key.
	if err := e.stageWith(id, staging, capMount("", rw), map[string]string{keywrap.SecretKey: keyOld}); err != nil {
		t.Fatal(err)
	}
	e.mustPublish(id, staging, target, capMount("", rw), false)
	if m, ok := e.top(target); !ok || m.Root != "/data" {
		t.Errorf("target mount %+v, want a bind of /data", m)
	}
	if err := e.unpublish(id, target); err != nil {
		t.Fatal(err)
	}
	if err := e.unstage(id, staging); err != nil {
		t.Fatal(err)
	}
	if st, _ := keys.Status(staging, kid); st != fscrypt.Absent {
		t.Errorf("key after unstage: %v, want absent", st)
	}
	if !reflect.DeepEqual(e.wrapped(id), w) {
		t.Error("stages with the same Secret changed the wrapped key")
	}

	// Rotation: the old key as previous rewraps the record; then the new
	// one alone opens it, and the old one alone no longer does.
	rotating := map[string]string{keywrap.SecretKey: keyNew, keywrap.SecretPreviousKey: keyOld}
	if err := e.stageWith(id, staging, capMount("", rw), rotating); err != nil {
		t.Fatal(err)
	}
	rw2 := e.wrapped(id)
	if rw2.KeyName != w.KeyName || reflect.DeepEqual(rw2, w) {
		t.Errorf("after a rotating stage the record holds %+v, want the same key rewrapped", rw2)
	}
	if err := e.unstage(id, staging); err != nil {
		t.Fatal(err)
	}
	if err := e.stageWith(id, staging, capMount("", rw), map[string]string{keywrap.SecretKey: keyNew}); err != nil {
		t.Fatal(err)
	}
	if err := e.unstage(id, staging); err != nil {
		t.Fatal(err)
	}
	formats := e.k.Calls("format")
	err = e.stageWith(id, staging, capMount("", rw), map[string]string{keywrap.SecretKey: keyOld})
	wantCode(t, "stage with the key rotated away", err, codes.FailedPrecondition)
	for _, want := range []string{keywrap.SecretKey, "nothing was formatted"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	if len(e.devices(id)) != 0 || e.k.Calls("format") != formats || !reflect.DeepEqual(e.wrapped(id), rw2) {
		t.Error("a refused stage attached, formatted or changed something")
	}
}

// A Secret that cannot open the key is refused before anything is made:
// no device, no filesystem, no key in the record.
func TestEncryptedStageRefusesBadSecrets(t *testing.T) {
	e := newNodeEnv(t)
	id := e.encrypted("a")
	for name, secrets := range map[string]map[string]string{
		"missing":      nil,
		"short":        {keywrap.SecretKey: "short"},
		"overlong":     {keywrap.SecretKey: strings.Repeat("k", keywrap.MaxMaterial+1)},
		"not UTF-8":    {keywrap.SecretKey: strings.Repeat("k", 40) + "\xff"},
		"bad previous": {keywrap.SecretKey: keyNew, keywrap.SecretPreviousKey: "x"},
	} {
		err := e.stageWith(id, e.staging("a"), capMount("", rw), secrets)
		wantCode(t, name, err, codes.FailedPrecondition)
		if !strings.Contains(err.Error(), "encryptionKey") && !strings.Contains(err.Error(), keywrap.SecretPreviousKey) {
			t.Errorf("%s: %v names no Secret field", name, err)
		}
	}
	v, _ := e.pool.Get(id)
	if e.k.Calls("format") != 0 || len(e.devices(id)) != 0 || v.Encryption.Wrapped != nil {
		t.Errorf("refused stages left formats %d, devices %v, key %v", e.k.Calls("format"), e.devices(id), v.Encryption.Wrapped)
	}
	err := e.stageWith(id, e.staging("b"), capBlock(rw), map[string]string{keywrap.SecretKey: keyNew})
	wantCode(t, "block stage of an encrypted volume", err, codes.FailedPrecondition)
}
