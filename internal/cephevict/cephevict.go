// Package cephevict fences a node of a shared pool on CephFS from the
// controller: it evicts the node's ceph-fuse client (`ceph tell mds.*
// client evict id=N`), which drops the client's locks, and with them the
// lock its loop device holds on a volume's image, and blocklists its
// address, so that nothing the node still buffers reaches the cluster.
// Without it a dead or cut-off node's lock holds until the MDS gives up on
// its client, about 65 s (docs/shared-pools-cephfs.md).
//
// The credentials come from the request's secrets (the StorageClass's
// controller-publish Secret): adminID and adminKey, a cephx user allowed
// to evict (`mon 'allow r' mds 'allow *'`, measured: with mds 'allow rw'
// the MDS refuses the command, EACCES; without a mon capability the
// monitors refuse the login; the nodes' clients must not have them). The
// key is written to a keyring, 0600 in a directory of this process's own
// (0700) in /dev/shm (memory) where there is one, removed after the call;
// it is never on a command line or in a message. The monitors are those of the controller's own ceph-fuse client
// of the pool (its admin socket's mon_host), and that client's cluster
// must be the one the node's client belonged to (its fsid, as the node
// recorded it): the CLI itself does not refuse monitors of another fsid
// than its configuration's (measured), so no Secret may name other
// monitors.
//
// It runs one program, ceph (ceph-common), with an argument list, under
// the request's context and a timeout.
package cephevict

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/filevol/filevol/internal/answer"
	"github.com/filevol/filevol/internal/volume"
)

// The keys of the secrets this package reads.
const (
	// KeyAdminID is the cephx user's name without "client." (as
	// ceph-csi's adminID).
	KeyAdminID = "adminID"
	// KeyAdminKey is its key, base64, as `ceph auth get-key` prints it.
	KeyAdminKey = "adminKey"
)

// DefaultTimeout bounds one eviction (the program's start, its
// connection to the monitors and the MDS's answer).
const DefaultTimeout = 30 * time.Second

// Evictor evicts clients of the cluster that serves Mount.
type Evictor struct {
	// Mount is a directory of the pool on the controller's own ceph-fuse
	// client.
	Mount string
	// Monitors reads mon_host and the fsid of the client serving a
	// directory (sharedfs.CephMonitors).
	Monitors func(dir string) (monitors, fsid string, err error)
	// Program is the ceph CLI ("ceph" when empty, found on PATH).
	Program string
	// Timeout bounds one eviction; DefaultTimeout when 0.
	Timeout time.Duration
	// KeyDir is where the keyring's private directory is made; "" picks
	// /dev/shm, a memory filesystem, where there is one (the key is then
	// never on a disk), else the system's temporary directory.
	KeyDir string
}

// keyDir is Evictor.KeyDir or its default.
func (e *Evictor) keyDir() string {
	if e.KeyDir != "" {
		return e.KeyDir
	}
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		return "/dev/shm"
	}
	return os.TempDir()
}

var (
	idPattern   = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)
	keyPattern  = regexp.MustCompile(`^[A-Za-z0-9+/]{4,256}={0,2}$`)
	fsidPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
)

// credentials reads the secrets: volume.ErrNoFenceCredentials when they
// hold neither key, a FAILED_PRECONDITION naming the key for one missing
// or malformed.
func credentials(s volume.Secrets) (id, key string, err error) {
	id, key = strings.TrimPrefix(s[KeyAdminID], "client."), s[KeyAdminKey]
	switch {
	case id == "" && key == "":
		return "", "", volume.ErrNoFenceCredentials
	case !idPattern.MatchString(id):
		return "", "", answer.FailedPrecondition("the controller-publish Secret's %s is missing or not a cephx user name (letters, digits, '.', '_', '-'; without \"client.\")", KeyAdminID)
	case !keyPattern.MatchString(key):
		return "", "", answer.FailedPrecondition("the controller-publish Secret's %s is missing or not a cephx key (base64, as `ceph auth get-key client.%s` prints it)", KeyAdminKey, id)
	}
	return id, key, nil
}

// Evict evicts the client r.Client names, in its cluster (r.Client.Cluster,
// which must be the controller's own client's), with r.Secrets'
// credentials. Without credentials it returns volume.ErrNoFenceCredentials
// and runs nothing.
func (e *Evictor) Evict(ctx context.Context, r volume.FenceRequest) error {
	id, key, err := credentials(r.Secrets)
	if err != nil {
		return err
	}
	if r.Client.Kind != "cephfs" || r.Client.ID == 0 || !fsidPattern.MatchString(r.Client.Cluster) {
		return answer.FailedPrecondition("node %s's record of its client (%s %d of %q) is not a CephFS client filevol can evict", r.Node, r.Client.Kind, r.Client.ID, r.Client.Cluster)
	}
	mons, fsid, err := e.Monitors(e.Mount)
	if err != nil {
		return answer.Coded(codes.Unavailable, "cannot read the controller's own ceph-fuse client of %s, whose monitors and cluster an eviction uses: %v", e.Mount, err)
	}
	if strings.ContainsAny(mons, "\n\r") {
		return answer.Coded(codes.Unavailable, "the controller's ceph-fuse client of %s runs with a mon_host of several lines", e.Mount)
	}
	if fsid != r.Client.Cluster {
		return answer.FailedPrecondition("node %s's client %d belongs to cluster %s, the controller's client of %s to cluster %s: not evicted in another cluster", r.Node, r.Client.ID, r.Client.Cluster, e.Mount, fsid)
	}
	timeout := e.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return e.run(ctx, r.Client, id, key, mons, timeout)
}

// run writes the configuration and keyring into a private directory and
// runs the CLI with them; the directory goes after.
func (e *Evictor) run(ctx context.Context, c volume.StorageClient, id, key, mons string, timeout time.Duration) error {
	dir, err := os.MkdirTemp(e.keyDir(), "filevol-evict-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	keyring := filepath.Join(dir, "keyring")
	if err := os.WriteFile(keyring, []byte(fmt.Sprintf("[client.%s]\n\tkey = %s\n", id, key)), 0o600); err != nil {
		return err
	}
	// No admin socket, no log file: nothing of it outlives the call.
	conf := filepath.Join(dir, "ceph.conf")
	text := fmt.Sprintf("[global]\nfsid = %s\nmon host = %s\nkeyring = %s\nadmin socket =\nlog file =\nlog to stderr = false\n", c.Cluster, mons, keyring)
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		return err
	}
	prog := e.Program
	if prog == "" {
		prog = "ceph"
	}
	secs := strconv.Itoa(max(1, int(timeout.Seconds())-2))
	cmd := exec.CommandContext(ctx, prog, "-c", conf, "--id", id, "--connect-timeout", secs,
		"tell", "mds.*", "client", "evict", "id="+strconv.FormatUint(c.ID, 10))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Dir = dir
	err = cmd.Run()
	if err == nil {
		return nil
	}
	return failure(ctx, id, c, mons, err, out.String())
}

// failure says why an eviction failed, with the code that tells the CO
// what to do: FAILED_PRECONDITION for credentials the cluster refuses
// (nothing changes until the Secret does), UNAVAILABLE for a cluster not
// reached or a program missing (a retry may do).
func failure(ctx context.Context, id string, c volume.StorageClient, mons string, err error, out string) error {
	out = strings.TrimSpace(out)
	if len(out) > 512 {
		out = out[len(out)-512:]
	}
	what := fmt.Sprintf("evict client %d of cluster %s as client.%s (monitors %s)", c.ID, c.Cluster, id, mons)
	switch {
	case errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist):
		return answer.Coded(codes.Unavailable, "%s: the ceph program (ceph-common) is not installed in the controller (the chart's filevol image has none: sharedPool.controller.cephCLI: true runs the controller from the filevol-ceph image, which has it): %v", what, err)
	case ctx.Err() != nil:
		return answer.Coded(codes.Unavailable, "%s: no answer in time (%v): %s", what, ctx.Err(), out)
	case strings.Contains(out, "permission denied") || strings.Contains(out, "EACCES") || strings.Contains(out, "access denied"):
		return answer.FailedPrecondition("%s: the cluster refused the credentials of the controller-publish Secret's %s and %s (a wrong key, or a user without mon 'allow r' mds 'allow *'); nothing was changed: %s",
			what, KeyAdminID, KeyAdminKey, out)
	}
	return answer.Coded(codes.Unavailable, "%s: %v: %s", what, err, out)
}
