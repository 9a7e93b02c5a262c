package encryption

import (
	"bytes"
	"context"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/keywrap"
	"github.com/filevol/filevol/test/driver"
)

// lockedBuffer is klog's output here: the gRPC server logs from its own
// goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// captureLog sends the driver's log, at the verbosity that logs every
// request and response, to a buffer until the test ends.
func captureLog(t *testing.T) *lockedBuffer {
	buf := &lockedBuffer{}
	flags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(flags)
	for k, v := range map[string]string{"v": "5", "logtostderr": "false", "alsologtostderr": "false", "stderrthreshold": "FATAL"} {
		if err := flags.Set(k, v); err != nil {
			t.Fatal(err)
		}
	}
	klog.SetOutput(buf)
	t.Cleanup(func() {
		klog.Flush()
		_ = flags.Set("v", "0")
		_ = flags.Set("logtostderr", "true")
		klog.SetOutput(os.Stderr)
	})
	return buf
}

// A class that names a provisioner Secret (csi.storage.k8s.io/
// provisioner-secret-name) makes CreateVolume carry it: filevol needs
// none (docs/encryption.md says why) and must neither refuse it nor keep
// or log it; the data key is made at the first stage and wrapped under
// the node-stage Secret alone.
func TestProvisionerSecretNeitherNeededNorKept(t *testing.T) {
	e := start(t)
	log := captureLog(t)
	provisioner := map[string]string{keywrap.SecretKey: "cHJvdmlzaW9uZXIgc2VjcmV0IG1hdGVyaWFsLCAzMiBieXRlcw==", "token": "provisioner-token-" + marker(t)}
	ctx := context.Background()
	create := func(secrets map[string]string) string {
		resp, err := e.d.Controller.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "with-provisioner-secret", Parameters: encParams,
			VolumeCapabilities: []*csipb.VolumeCapability{driver.MountCap("ext4")}, CapacityRange: &csipb.CapacityRange{RequiredBytes: 64 << 20},
			Secrets: secrets})
		if err != nil {
			t.Fatalf("CreateVolume with a provisioner Secret: %v", err)
		}
		return resp.GetVolume().GetVolumeId()
	}
	id := create(provisioner)
	t.Cleanup(func() { _, _ = e.d.Controller.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: id}) })
	// The Secret is not a parameter: a retry with another one (rotated
	// meanwhile) is the same volume, not ALREADY_EXISTS.
	if again := create(map[string]string{keywrap.SecretKey: newKey[keywrap.SecretKey]}); again != id {
		t.Errorf("the retry with another provisioner Secret made %s, want %s", again, id)
	}
	if v, err := e.d.Pool.Get(id); err != nil || v.Encryption == nil || v.Encryption.Wrapped != nil {
		t.Fatalf("after CreateVolume: %+v, %v; want an encrypted volume without a key yet", v.Encryption, err)
	}
	m := marker(t)
	if err := os.WriteFile(filepath.Join(e.up(id, oldKey), "m"), []byte(m), 0o644); err != nil {
		t.Fatal(err)
	}
	e.down(id)
	// Wrapped under the node-stage Secret: it opens with that alone.
	if got, err := os.ReadFile(filepath.Join(e.up(id, oldKey), "m")); err != nil || string(got) != m {
		t.Errorf("the marker: %q, %v", got, err)
	}
	e.down(id)

	klog.Flush()
	text := log.String()
	if !strings.Contains(text, "CreateVolume") || !strings.Contains(text, "NodeStageVolume") {
		t.Fatalf("the driver's log does not show the requests, so the check below could not fail:\n%s", text)
	}
	secretValues := []string{provisioner[keywrap.SecretKey], provisioner["token"], newKey[keywrap.SecretKey], oldKey[keywrap.SecretKey]}
	for _, s := range secretValues {
		if strings.Contains(text, s) {
			t.Errorf("the driver's log holds a Secret's value %q", s)
		}
	}
	_ = filepath.WalkDir(e.d.Pool.Dir(), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(path, ".img") {
			return nil
		}
		data, err := os.ReadFile(path)
		for _, s := range secretValues {
			if err == nil && bytes.Contains(data, []byte(s)) {
				t.Errorf("%s holds a Secret's value", path)
			}
		}
		return nil
	})
}
