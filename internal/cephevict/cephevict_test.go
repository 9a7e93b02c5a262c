package cephevict

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/filevol/filevol/internal/answer"
	"github.com/filevol/filevol/internal/volume"
)

// This test binary is also the fake ceph CLI (FAKE_CEPH_OUT set): it
// writes what it was given (its arguments, the modes of its files and
// directory, the keyring's text) to that file, prints FAKE_CEPH_SAY and
// exits with FAKE_CEPH_EXIT. The real CLI is run by test/multinode.
func TestMain(m *testing.M) {
	if out := os.Getenv("FAKE_CEPH_OUT"); out != "" {
		os.Exit(fakeCeph(out))
	}
	os.Exit(m.Run())
}

func fakeCeph(out string) int {
	var b strings.Builder
	fmt.Fprintf(&b, "args %s\n", strings.Join(os.Args[1:], " "))
	conf := os.Args[2]
	for _, p := range []string{filepath.Dir(conf), conf, filepath.Join(filepath.Dir(conf), "keyring")} {
		st, err := os.Stat(p)
		if err != nil {
			fmt.Fprintf(&b, "stat %s: %v\n", filepath.Base(p), err)
			continue
		}
		fmt.Fprintf(&b, "mode %s %o\n", filepath.Base(p), st.Mode().Perm())
	}
	text, _ := os.ReadFile(filepath.Join(filepath.Dir(conf), "keyring"))
	c, _ := os.ReadFile(conf)
	fmt.Fprintf(&b, "keyring %s\nconf %s\n", text, c)
	_ = os.WriteFile(out, []byte(b.String()), 0o600)
	fmt.Fprint(os.Stderr, os.Getenv("FAKE_CEPH_SAY"))
	var code int
	fmt.Sscan(os.Getenv("FAKE_CEPH_EXIT"), &code)
	return code
}

const (
	fsid = "d034fad0-ebd3-4b1c-b9b7-4e42fe4397f3"
	key  = "AQBA5Qtrh1srGRAAWsalfCCUHnM+zyhJtF/ehg=="
)

func request(secrets volume.Secrets) volume.FenceRequest {
	return volume.FenceRequest{Call: "ControllerUnpublishVolume", VolumeID: "v", Node: "node-a",
		Client: volume.StorageClient{Kind: "cephfs", ID: 4127, Cluster: fsid}, Secrets: secrets}
}

// evictor runs this binary as its ceph, which records into the file
// returned, and reads the controller's client as being of cluster own.
func evictor(t *testing.T, own string, exit int, say string) (*Evictor, string) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "ceph.out")
	t.Setenv("FAKE_CEPH_OUT", out)
	t.Setenv("FAKE_CEPH_EXIT", fmt.Sprint(exit))
	t.Setenv("FAKE_CEPH_SAY", say)
	return &Evictor{Mount: "/pool", Program: self, KeyDir: t.TempDir(), Monitors: func(dir string) (string, string, error) {
		if dir != "/pool" {
			t.Errorf("monitors read from %s, want the controller's mount /pool", dir)
		}
		return "[v2:10.0.0.1:3300,v1:10.0.0.1:6789]", own, nil
	}}, out
}

func wantCoded(t *testing.T, what string, err error, code codes.Code, parts ...string) {
	t.Helper()
	var c *answer.CodedError
	if !errors.As(err, &c) || c.Code != code {
		t.Fatalf("%s: %v, want %s", what, err, code)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("%s: %q does not say %q", what, err, p)
		}
	}
	if strings.Contains(err.Error(), key) {
		t.Errorf("%s: the message holds the key: %q", what, err)
	}
}

// The credentials: none is ErrNoFenceCredentials and runs nothing; one
// missing or malformed is FAILED_PRECONDITION naming the key; a client of
// another cluster than the controller's is refused before anything runs.
func TestRefusedBeforeAnythingRuns(t *testing.T) {
	e, out := evictor(t, fsid, 0, "")
	if err := e.Evict(context.Background(), request(nil)); !errors.Is(err, volume.ErrNoFenceCredentials) {
		t.Errorf("no secrets: %v, want ErrNoFenceCredentials", err)
	}
	if err := e.Evict(context.Background(), request(volume.Secrets{"other": "x"})); !errors.Is(err, volume.ErrNoFenceCredentials) {
		t.Errorf("secrets without the keys: %v, want ErrNoFenceCredentials", err)
	}
	wantCoded(t, "no key", e.Evict(context.Background(), request(volume.Secrets{KeyAdminID: "fence"})), codes.FailedPrecondition, KeyAdminKey)
	wantCoded(t, "no user", e.Evict(context.Background(), request(volume.Secrets{KeyAdminKey: key})), codes.FailedPrecondition, KeyAdminID)
	wantCoded(t, "a user with a newline", e.Evict(context.Background(), request(volume.Secrets{KeyAdminID: "a\nb", KeyAdminKey: key})), codes.FailedPrecondition, KeyAdminID)
	wantCoded(t, "a key not base64", e.Evict(context.Background(), request(volume.Secrets{KeyAdminID: "fence", KeyAdminKey: key + "\n[x]"})), codes.FailedPrecondition, KeyAdminKey)
	other, _ := evictor(t, "00000000-ebd3-4b1c-b9b7-4e42fe4397f3", 0, "")
	wantCoded(t, "another cluster", other.Evict(context.Background(), request(volume.Secrets{KeyAdminID: "fence", KeyAdminKey: key})), codes.FailedPrecondition,
		"belongs to cluster "+fsid, "not evicted in another cluster")
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("the program ran for a refused request: %v", err)
	}
}

// An eviction runs `ceph tell mds.* client evict id=N` with the key in a
// keyring 0600 in a directory 0700, never on the command line, and
// removes the directory after; the CLI's refusal of the credentials is
// FAILED_PRECONDITION naming the Secret's keys, other failures
// UNAVAILABLE.
func TestEvictRunsTheCLI(t *testing.T) {
	e, out := evictor(t, fsid, 0, "")
	if err := e.Evict(context.Background(), request(volume.Secrets{KeyAdminID: "client.fence", KeyAdminKey: key})); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	t.Logf("the CLI got:\n%s", got)
	for _, want := range []string{"--id fence --connect-timeout 28 tell mds.* client evict id=4127\n", "mode ceph.conf 600\n", "mode keyring 600\n",
		"keyring [client.fence]\n\tkey = " + key + "\n", "fsid = " + fsid + "\n", "mon host = [v2:10.0.0.1:3300,v1:10.0.0.1:6789]\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("the CLI did not get %q", want)
		}
	}
	if !strings.Contains(got, "\nmode filevol-evict-") || !strings.Contains(got, " 700\n") {
		t.Errorf("the private directory's mode is not 0700")
	}
	if args := strings.SplitN(got, "\n", 2)[0]; strings.Contains(args, key) {
		t.Errorf("the key is on the command line: %s", args)
	}
	if left, _ := filepath.Glob(filepath.Join(e.KeyDir, "*")); len(left) > 0 {
		t.Errorf("left after the call: %v", left)
	}

	e, _ = evictor(t, fsid, 13, "[errno 13] RADOS permission denied (error connecting to the cluster)")
	wantCoded(t, "a wrong key", e.Evict(context.Background(), request(volume.Secrets{KeyAdminID: "fence", KeyAdminKey: key})), codes.FailedPrecondition,
		KeyAdminID, KeyAdminKey, "nothing was changed", "mon 'allow r' mds 'allow *'")
	e, _ = evictor(t, fsid, 13, "Error EACCES: problem getting command descriptions from mds.a")
	wantCoded(t, "caps too small", e.Evict(context.Background(), request(volume.Secrets{KeyAdminID: "fence", KeyAdminKey: key})), codes.FailedPrecondition, KeyAdminKey)
	e, _ = evictor(t, fsid, 1, "error connecting to the cluster: timed out")
	wantCoded(t, "no monitor", e.Evict(context.Background(), request(volume.Secrets{KeyAdminID: "fence", KeyAdminKey: key})), codes.Unavailable, "timed out")
	e.Program = filepath.Join(t.TempDir(), "ceph")
	wantCoded(t, "no program", e.Evict(context.Background(), request(volume.Secrets{KeyAdminID: "fence", KeyAdminKey: key})), codes.Unavailable, "ceph-common", "sharedPool.controller.cephCLI")
}
