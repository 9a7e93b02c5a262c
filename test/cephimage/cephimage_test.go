// Package cephimage proves the filevol-ceph image (hack/images.sh --ceph):
// its own ceph program, run from the image's rootfs as the chart runs the
// shared controller's filevol (read-only, no capability: wrapper_test.go),
// prints its version, answers the harness's cluster (status, client ls)
// and evicts a node's ceph-fuse client through internal/cephevict, the
// code the controller runs. FILEVOL_CEPH_IMAGE names the image tarball
// (make images-ceph-test sets it); without it the test skips, as in make
// test.
package cephimage

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/filevol/filevol/internal/answer"
	"github.com/filevol/filevol/internal/cephevict"
	"github.com/filevol/filevol/internal/sharedfs"
	"github.com/filevol/filevol/internal/testutil"
	"github.com/filevol/filevol/internal/testutil/ceph"
	"github.com/filevol/filevol/internal/volume"
)

// envImage names the image tarball under test.
const envImage = "FILEVOL_CEPH_IMAGE"

// TestMain: with envRootfs set this binary is the image's ceph
// (chrootCeph); otherwise the tests, then the harness's teardown.
func TestMain(m *testing.M) {
	if root := os.Getenv(envRootfs); root != "" {
		os.Exit(chrootCeph(root, os.Getenv(envNetns), os.Getenv(envBind), os.Args[1:]))
	}
	os.Exit(ceph.Main(m))
}

// image is the unpacked image, readied for the wrapper: mount points for
// /proc, the devices and keys (a directory of the host, shown at the same
// path inside, where the test and internal/cephevict write keyrings).
func image(t *testing.T) (root, keys string) {
	t.Helper()
	path := os.Getenv(envImage)
	if path == "" {
		t.Skipf("%s is not set: make images-ceph builds the image (hack/images.sh --ceph), make images-ceph-test runs this test with it", envImage)
	}
	testutil.RequireRoot(t)
	dir := testutil.Scratch(t, "cephimage")
	root = unpack(t, path, dir)
	keys = filepath.Join(dir, "keys")
	if err := os.Mkdir(keys, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"proc", "dev", keys} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range devices {
		if err := os.WriteFile(filepath.Join(root, "dev", d), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv(envRootfs, root)
	t.Setenv(envBind, keys)
	return root, keys
}

// cli runs the image's ceph (this binary as the wrapper) with args in
// the network namespace netns ("" this one).
func cli(t *testing.T, netns string, args ...string) (string, error) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, self, args...)
	cmd.Env = append(os.Environ(), envNetns+"="+netns)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	return out.String(), err
}

func TestImageCeph(t *testing.T) {
	_, keys := image(t)

	out, err := cli(t, "", "--version")
	if err != nil || !strings.HasPrefix(out, "ceph version 16.2.") {
		t.Fatalf("ceph --version in the image: %v: %q", err, out)
	}
	t.Logf("the image's %s", strings.TrimSpace(out))

	c := ceph.Shared(t)
	ctrl := c.MountNode(t, "controller")
	c.MountNode(t, "node-a")
	netns := c.NodeNetns(t, "controller")
	monitors := func(dir string) (string, string, error) {
		return sharedfs.CephMonitors(dir, sharedfs.Options{CephSocketDirs: []string{c.RunDir()}})
	}
	mons, fsid, err := monitors(ctrl)
	if err != nil {
		t.Fatalf("the controller's client's monitors: %v", err)
	}

	// As client.admin, from the controller's network, the way the
	// controller's pod reaches the cluster.
	conf, admin := filepath.Join(keys, "ceph.conf"), filepath.Join(keys, "admin.keyring")
	text := "[global]\nfsid = " + fsid + "\nmon host = " + mons + "\nadmin socket =\nlog file =\nlog to stderr = false\n"
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	key, err := os.ReadFile(filepath.Join(c.Dir(), "keys", "client.admin.keyring"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(admin, key, 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"-c", conf, "-n", "client.admin", "--keyring", admin, "--connect-timeout", "20"}
	out, err = cli(t, netns, append(base, "status", "--format", "json")...)
	var st struct {
		FSID   string `json:"fsid"`
		Health struct {
			Status string `json:"status"`
		} `json:"health"`
	}
	if err != nil || json.Unmarshal([]byte(out), &st) != nil || st.FSID != c.FSID() || st.Health.Status == "" {
		t.Fatalf("ceph status from the image: %v: %s (fsid %q, want %s)", err, out, st.FSID, c.FSID())
	}
	t.Logf("ceph status from the image: fsid %s, %s", st.FSID, st.Health.Status)

	victim := c.Client(t, "node-a")
	if !listed(t, netns, base, victim.ID) {
		t.Fatalf("`ceph tell mds.* client ls` from the image does not list node-a's client %d", victim.ID)
	}

	// internal/cephevict, as the controller runs it, with the image's ceph.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(envNetns, netns)
	e := &cephevict.Evictor{Mount: ctrl, Monitors: monitors, Program: self, KeyDir: keys}
	user := "fence-image"
	good := c.AddUser(t, user, "mon", "allow r", "mds", "allow *")
	wrong := []byte(good)
	wrong[20] = map[bool]byte{true: 'B', false: 'A'}[wrong[20] == 'A'] // still base64, another key
	req := func(k string) volume.FenceRequest {
		return volume.FenceRequest{Call: "ControllerUnpublishVolume", VolumeID: "v", Node: "node-a",
			Client:  volume.StorageClient{Kind: "cephfs", ID: victim.ID, Cluster: c.FSID()},
			Secrets: volume.Secrets{cephevict.KeyAdminID: user, cephevict.KeyAdminKey: k}}
	}

	err = e.Evict(context.Background(), req(string(wrong)))
	var coded *answer.CodedError
	if !errors.As(err, &coded) || coded.Code != codes.FailedPrecondition || !strings.Contains(err.Error(), cephevict.KeyAdminKey) ||
		strings.Contains(err.Error(), string(wrong)) {
		t.Fatalf("eviction with a wrong key through the image's ceph: %v, want FAILED_PRECONDITION naming %s (and not the key)", err, cephevict.KeyAdminKey)
	}
	if !listed(t, netns, base, victim.ID) {
		t.Fatalf("node-a's client %d is gone after an eviction the cluster refused", victim.ID)
	}

	start := time.Now()
	if err := e.Evict(context.Background(), req(good)); err != nil {
		t.Fatalf("eviction through the image's ceph: %v", err)
	}
	t.Logf("node-a's client %d evicted through the image's ceph in %v", victim.ID, time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() { c.Unblocklist(t, victim) })
	if listed(t, netns, base, victim.ID) {
		t.Fatalf("node-a's client %d is still listed after its eviction", victim.ID)
	}
	if bl := c.Ceph(t, "osd", "blocklist", "ls"); !strings.Contains(bl, victim.Addr) {
		t.Fatalf("node-a's address %s is not in the blocklist after its eviction: %s", victim.Addr, bl)
	}
	left, err := filepath.Glob(filepath.Join(keys, "filevol-evict-*"))
	if err != nil || len(left) != 0 {
		t.Fatalf("the evictions left their key directories: %v %v", left, err)
	}
}

// listed: the MDS lists client id, asked by the image's ceph
// (`tell mds.* client ls`, every MDS).
func listed(t *testing.T, netns string, base []string, id uint64) bool {
	t.Helper()
	out, err := cli(t, netns, append(base, "tell", "mds.*", "client", "ls", "--format", "json")...)
	if err != nil {
		t.Fatalf("ceph tell mds.* client ls from the image: %v: %s", err, out)
	}
	// With mds.* the CLI may prefix each MDS's answer with its name.
	for _, l := range strings.Split(out, "\n") {
		_, named, _ := strings.Cut(l, ": ")
		for _, body := range []string{l, named} {
			var ls []struct {
				ID uint64 `json:"id"`
			}
			if json.Unmarshal([]byte(body), &ls) != nil {
				continue
			}
			for _, s := range ls {
				if s.ID == id {
					return true
				}
			}
		}
	}
	return false
}
