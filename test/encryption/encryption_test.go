// Package encryption tests encrypted image volumes (StorageClass
// encryption: fscrypt) on the real kernel, through the CSI gRPC API of an
// in-process driver: what reaches the image file, what an unstaged
// volume shows to root, the Secret's rotation, and the refusals.
package encryption

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/filevol/filevol/internal/keywrap"
	"github.com/filevol/filevol/internal/testutil"
	"github.com/filevol/filevol/test/driver"
)

var (
	oldKey    = map[string]string{keywrap.SecretKey: "b2xkIGtleSBtYXRlcmlhbCwgMzIgYnl0ZXMgb3IgbW9yZQ=="}
	newKey    = map[string]string{keywrap.SecretKey: "bmV3IGtleSBtYXRlcmlhbCwgMzIgYnl0ZXMgb3IgbW9yZQ=="}
	rotating  = map[string]string{keywrap.SecretKey: newKey[keywrap.SecretKey], keywrap.SecretPreviousKey: oldKey[keywrap.SecretKey]}
	encParams = map[string]string{"encryption": "fscrypt"}
)

type env struct {
	t   *testing.T
	d   *driver.Driver
	dir string
}

func start(t *testing.T) *env {
	testutil.RequireRoot(t)
	for _, tool := range []string{"mkfs.ext4", "blkid", "mount", "umount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	dir := testutil.Scratch(t, "encryption")
	e := &env{t: t, d: driver.Start(t, dir), dir: dir}
	t.Cleanup(func() {
		if t.Failed() {
			return // what a failure left, Scratch's cleanup removes
		}
		if m := driver.Mounts(t, dir); len(m) != 0 {
			t.Errorf("mounts left: %v", m)
		}
		if l := driver.Loops(t, dir); len(l) != 0 {
			t.Errorf("loop devices left: %v", l)
		}
	})
	return e
}

func (e *env) create(name string, params map[string]string, c *csipb.VolumeCapability, src *csipb.VolumeContentSource) (string, error) {
	resp, err := e.d.Controller.CreateVolume(context.Background(), &csipb.CreateVolumeRequest{
		Name: name, Parameters: params, VolumeCapabilities: []*csipb.VolumeCapability{c},
		CapacityRange: &csipb.CapacityRange{RequiredBytes: 64 << 20}, VolumeContentSource: src})
	return resp.GetVolume().GetVolumeId(), err
}

func (e *env) mustCreate(name string, params map[string]string, src *csipb.VolumeContentSource) string {
	e.t.Helper()
	id, err := e.create(name, params, driver.MountCap("ext4"), src)
	if err != nil {
		e.t.Fatalf("create %s: %v", name, err)
	}
	e.t.Cleanup(func() {
		_, _ = e.d.Controller.DeleteVolume(context.Background(), &csipb.DeleteVolumeRequest{VolumeId: id})
	})
	return id
}

func (e *env) staging(id string) string { return filepath.Join(e.dir, "kubelet", "staging", id) }
func (e *env) target(id string) string  { return filepath.Join(e.dir, "kubelet", "pods", id, "mount") }

func (e *env) stage(id string, secrets map[string]string) error {
	_, err := e.d.Node.NodeStageVolume(context.Background(), &csipb.NodeStageVolumeRequest{
		VolumeId: id, StagingTargetPath: e.staging(id), VolumeCapability: driver.MountCap("ext4"), Secrets: secrets})
	return err
}

// up stages and publishes the volume and returns its target.
func (e *env) up(id string, secrets map[string]string) string {
	e.t.Helper()
	if err := e.stage(id, secrets); err != nil {
		e.t.Fatalf("stage %s: %v", id, err)
	}
	if _, err := e.d.Node.NodePublishVolume(context.Background(), &csipb.NodePublishVolumeRequest{
		VolumeId: id, StagingTargetPath: e.staging(id), TargetPath: e.target(id), VolumeCapability: driver.MountCap("ext4")}); err != nil {
		e.t.Fatalf("publish %s: %v", id, err)
	}
	return e.target(id)
}

func (e *env) down(id string) {
	e.t.Helper()
	ctx := context.Background()
	if _, err := e.d.Node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: e.target(id)}); err != nil {
		e.t.Fatalf("unpublish %s: %v", id, err)
	}
	if _, err := e.d.Node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: e.staging(id)}); err != nil {
		e.t.Fatalf("unstage %s: %v", id, err)
	}
}

func (e *env) image(id string) []byte {
	e.t.Helper()
	b, err := os.ReadFile(e.d.Pool.ImagePath(id))
	if err != nil {
		e.t.Fatal(err)
	}
	return b
}

func (e *env) wrapped(id string) keywrap.Wrapped {
	e.t.Helper()
	v, err := e.d.Pool.Get(id)
	if err != nil || v.Encryption == nil || v.Encryption.Wrapped == nil {
		e.t.Fatalf("record of %s: %+v, %v; want a wrapped key", id, v.Encryption, err)
	}
	return *v.Encryption.Wrapped
}

// signature is what blkid finds on the volume's image ("" for nothing, or
// no image at all).
func (e *env) signature(id string) string {
	e.t.Helper()
	img := e.d.Pool.ImagePath(id)
	if _, err := os.Stat(img); errors.Is(err, os.ErrNotExist) {
		return ""
	}
	out, err := exec.Command("blkid", "-p", "-o", "value", "-s", "TYPE", img).Output()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 2 {
		return ""
	}
	if err != nil {
		e.t.Fatalf("blkid %s: %v", img, err)
	}
	return strings.TrimSpace(string(out))
}

func marker(t *testing.T) string {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "filevol-marker-" + hex.EncodeToString(b)
}

func wantCode(t *testing.T, what string, err error, code codes.Code, says ...string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("%s: %v, want %v", what, err, code)
	}
	for _, s := range says {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%s: %q does not say %q", what, err, s)
		}
	}
}

// What a pod writes reaches the image only encrypted (and a volume in
// clear, the control, shows its marker, so the check can fail); once
// unstaged, root mounting the image sees ciphertext names and ENOKEY.
func TestEncryptedAtRest(t *testing.T) {
	e := start(t)
	enc := e.mustCreate("enc", encParams, nil)
	plain := e.mustCreate("plain", nil, nil)
	secret, control := marker(t), marker(t)
	name := "name-" + marker(t)
	for id, m := range map[string]string{enc: secret, plain: control} {
		target := e.up(id, oldKey)
		if err := os.WriteFile(filepath.Join(target, name), bytes.Repeat([]byte(m), 64), 0o644); err != nil {
			t.Fatal(err)
		}
		e.down(id)
	}
	if img := e.image(plain); !bytes.Contains(img, []byte(control)) {
		t.Fatal("the control marker is not in the clear volume's image: the check below could not fail")
	}
	img := e.image(enc)
	if bytes.Contains(img, []byte(secret)) || bytes.Contains(img, []byte(name)) {
		t.Fatal("the encrypted volume's image holds the marker or its file name in clear")
	}

	mnt := filepath.Join(e.dir, "root-view")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-o", "ro,loop,noload", e.d.Pool.ImagePath(enc), mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount the image: %v: %s", err, out)
	}
	entries, err := os.ReadDir(filepath.Join(mnt, "data"))
	if err != nil || len(entries) != 1 {
		t.Fatalf("data/ of the unstaged volume: %v, %v", entries, err)
	}
	if entries[0].Name() == name {
		t.Error("root reads the file's name in clear without the key")
	}
	if _, err := os.ReadFile(filepath.Join(mnt, "data", entries[0].Name())); !errors.Is(err, unix.ENOKEY) {
		t.Errorf("reading the file without the key: %v, want ENOKEY", err)
	}
	if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
		t.Fatalf("umount: %v: %s", err, out)
	}

	target := e.up(enc, oldKey)
	if got, err := os.ReadFile(filepath.Join(target, name)); err != nil || !bytes.Contains(got, []byte(secret)) {
		t.Errorf("the marker after staging again: %v", err)
	}
	e.down(enc)
}

// Rotation: the old key as previousEncryptionKey opens the volume and
// rewraps its record; then the new key alone opens it, and the old one
// alone is refused, naming the field, with nothing changed.
func TestRotationAndRefusals(t *testing.T) {
	e := start(t)
	id := e.mustCreate("rot", encParams, nil)
	m := marker(t)
	if err := os.WriteFile(filepath.Join(e.up(id, oldKey), "m"), []byte(m), 0o644); err != nil {
		t.Fatal(err)
	}
	e.down(id)
	before := e.wrapped(id)
	e.up(id, rotating)
	e.down(id)
	after := e.wrapped(id)
	if after.KeyName != before.KeyName || reflect.DeepEqual(after, before) {
		t.Fatalf("a rotating stage left %+v, want the same key rewrapped", after)
	}
	e.up(id, newKey)
	e.down(id)
	err := e.stage(id, oldKey)
	wantCode(t, "stage with the old key alone", err, codes.FailedPrecondition, keywrap.SecretKey, "nothing was formatted")
	if !reflect.DeepEqual(e.wrapped(id), after) || len(driver.Loops(t, e.dir)) != 0 || len(driver.Mounts(t, e.dir)) != 0 {
		t.Error("the refused stage changed the record or left a device or mount")
	}
	if got, err := os.ReadFile(filepath.Join(e.up(id, newKey), "m")); err != nil || string(got) != m {
		t.Errorf("the marker after the refusal: %q, %v", got, err)
	}
	e.down(id)

	// A first stage with a Secret that cannot be a key formats nothing.
	fresh := e.mustCreate("fresh", encParams, nil)
	for what, secrets := range map[string]map[string]string{
		"missing":  nil,
		"empty":    {keywrap.SecretKey: ""},
		"short":    {keywrap.SecretKey: "too-short"},
		"overlong": {keywrap.SecretKey: strings.Repeat("k", keywrap.MaxMaterial+1)},
	} {
		wantCode(t, what, e.stage(fresh, secrets), codes.FailedPrecondition, keywrap.SecretKey)
		if sig := e.signature(fresh); sig != "" {
			t.Fatalf("%s: the image carries %q after a refused stage", what, sig)
		}
	}
	// A Secret that is not UTF-8 cannot even be sent: gRPC refuses to
	// marshal it (the driver's own refusal is keywrap's unit test).
	if err := e.stage(fresh, map[string]string{keywrap.SecretKey: strings.Repeat("k", 40) + "\xff\xfe"}); err == nil || e.signature(fresh) != "" {
		t.Errorf("a Secret that is not UTF-8: %v, and the image carries %q", err, e.signature(fresh))
	}
	if v, err := e.d.Pool.Get(fresh); err != nil || v.Encryption.Wrapped != nil {
		t.Errorf("refused stages recorded a key: %+v, %v", v.Encryption, err)
	}
}

// What fscrypt cannot encrypt is refused at create.
func TestCreateRefusals(t *testing.T) {
	e := start(t)
	for _, c := range []struct {
		name   string
		params map[string]string
		cap    *csipb.VolumeCapability
		says   string
	}{
		{"block", encParams, driver.BlockCap(), "dm-crypt"},
		{"xfs", encParams, driver.MountCap("xfs"), "xfs"},
		{"btrfs", encParams, driver.MountCap("btrfs"), "btrfs"},
		{"directory", map[string]string{"encryption": "fscrypt", "provisioningMode": "directory"}, driver.MountCap(""), "directory volumes"},
		{"other scheme", map[string]string{"encryption": "luks"}, driver.MountCap(""), "fscrypt"},
	} {
		_, err := e.create(c.name, c.params, c.cap, nil)
		wantCode(t, c.name, err, codes.InvalidArgument, c.says)
	}
}

// A snapshot of an encrypted volume restores, with the same Secret, to a
// volume holding the marker; into a class in clear it is refused. The
// volume grows online, and its stats are read, while published.
func TestSnapshotRestoreAndExpand(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	id := e.mustCreate("src", encParams, nil)
	m := marker(t)
	if err := os.WriteFile(filepath.Join(e.up(id, oldKey), "m"), []byte(m), 0o644); err != nil {
		t.Fatal(err)
	}
	e.down(id)
	snap, err := e.d.Controller.CreateSnapshot(ctx, &csipb.CreateSnapshotRequest{Name: "snap", SourceVolumeId: id})
	if err != nil {
		t.Fatal(err)
	}
	sid := snap.GetSnapshot().GetSnapshotId()
	t.Cleanup(func() { _, _ = e.d.Controller.DeleteSnapshot(ctx, &csipb.DeleteSnapshotRequest{SnapshotId: sid}) })
	src := &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Snapshot{Snapshot: &csipb.VolumeContentSource_SnapshotSource{SnapshotId: sid}}}
	_, err = e.create("clear-restore", nil, driver.MountCap("ext4"), src)
	wantCode(t, "restore into a class in clear", err, codes.InvalidArgument, "is encrypted")
	restored := e.mustCreate("restored", encParams, src)
	target := e.up(restored, oldKey)
	if got, err := os.ReadFile(filepath.Join(target, "m")); err != nil || string(got) != m {
		t.Errorf("the restored marker: %q, %v", got, err)
	}

	stats := func() int64 {
		r, err := e.d.Node.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: restored, VolumePath: target})
		if err != nil {
			t.Fatalf("stats: %v", err)
		}
		for _, u := range r.GetUsage() {
			if u.GetUnit() == csipb.VolumeUsage_BYTES {
				return u.GetTotal()
			}
		}
		t.Fatalf("no byte usage in %v", r)
		return 0
	}
	total := stats()
	if _, err := e.d.Controller.ControllerExpandVolume(ctx, &csipb.ControllerExpandVolumeRequest{VolumeId: restored,
		CapacityRange: &csipb.CapacityRange{RequiredBytes: 128 << 20}, VolumeCapability: driver.MountCap("ext4")}); err != nil {
		t.Fatal(err)
	}
	_, err = e.d.Node.NodeExpandVolume(ctx, &csipb.NodeExpandVolumeRequest{VolumeId: restored, VolumePath: target,
		StagingTargetPath: e.staging(restored), CapacityRange: &csipb.CapacityRange{RequiredBytes: 128 << 20}, VolumeCapability: driver.MountCap("ext4")})
	if err != nil {
		// Without CAP_SYS_RESOURCE ext4 grows offline, at the next stage.
		wantCode(t, "online growth", err, codes.FailedPrecondition, "CAP_SYS_RESOURCE")
		e.down(restored)
		target = e.up(restored, oldKey)
	}
	if grown := stats(); grown <= total+32<<20 {
		t.Errorf("filesystem of %d bytes after growing to 128 MiB (was %d)", grown, total)
	}
	if got, err := os.ReadFile(filepath.Join(target, "m")); err != nil || string(got) != m {
		t.Errorf("the marker after the expansion: %q, %v", got, err)
	}
	e.down(restored)
}
