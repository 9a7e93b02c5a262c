package dirnode

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"

	"github.com/filevol/filevol/internal/answer"
	"github.com/filevol/filevol/internal/dirpool"
	"github.com/filevol/filevol/internal/hostos/fake"
	"github.com/filevol/filevol/internal/hostos/mount"
	"github.com/filevol/filevol/internal/volume"
)

// The node half runs on the fake kernel (its mount table) and on a real
// directory pool: a plain one (no quota) in the test's temporary
// directory, which needs no root as long as the volume is owned by the
// test's own user and group (a chown to anyone else would).

type scene struct {
	fk      *fake.Host
	pool    *dirpool.Pool
	node    *Node
	vol     volume.Volume
	kubelet string
	// staging and pod (a pod's directory kubelet made: targets go in it).
	staging, pod string
}

func newScene(t *testing.T) *scene {
	t.Helper()
	tmp := t.TempDir()
	var sfs unix.Statfs_t
	if err := unix.Statfs(tmp, &sfs); err != nil {
		t.Fatal(err)
	}
	if sfs.Type == unix.BTRFS_SUPER_MAGIC {
		// A pool on btrfs enables quotas and makes subvolumes: root's.
		t.Skip("the temporary directory is on btrfs; these tests need a plain pool")
	}
	s := &scene{fk: fake.New(), kubelet: filepath.Join(tmp, "kubelet")}
	s.staging, s.pod = filepath.Join(s.kubelet, "staging"), filepath.Join(s.kubelet, "pods", "p1")
	poolDir := filepath.Join(tmp, "pool")
	for _, d := range []string{poolDir, s.pod} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	p, err := dirpool.Open(poolDir, dirpool.Options{NodeID: "n1", GuardInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	s.pool = p
	s.node = New(p, s.fk.Host(), s.kubelet)
	s.vol = s.create(t, "v1")
	return s
}

func (s *scene) create(t *testing.T, name string) volume.Volume {
	t.Helper()
	v, err := s.pool.Create(context.Background(), volume.CreateRequest{Name: name, CapacityBytes: 8 << 20,
		Parameters: map[string]string{dirpool.ParamAllowUnenforcedSize: "true",
			dirpool.ParamUID: strconv.Itoa(os.Getuid()), dirpool.ParamGID: strconv.Itoa(os.Getgid())}})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func (s *scene) target(name string) string { return filepath.Join(s.pod, name) }

func (s *scene) stage(t *testing.T) {
	t.Helper()
	if _, err := s.node.Stage(context.Background(), s.vol, volume.StageRequest{StagingPath: s.staging}); err != nil {
		t.Fatalf("stage: %v", err)
	}
}

func (s *scene) publish(v volume.Volume, target string, readOnly, single bool) error {
	return s.node.Publish(context.Background(), v, volume.PublishRequest{StagingPath: s.staging, TargetPath: target,
		ReadOnly: readOnly, SingleWriter: single})
}

// top is what the fake's table shows at path.
func (s *scene) top(t *testing.T, path string) (mount.Info, bool) {
	t.Helper()
	table, err := s.fk.Table()
	if err != nil {
		t.Fatal(err)
	}
	return table.Top(path)
}

// volumeDir is the volume's directory as mountinfo's root field names it:
// the pool is on the fake's root filesystem.
func (s *scene) volumeDir(t *testing.T, v volume.Volume) string {
	t.Helper()
	rec, err := s.pool.Record(v.ID)
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(s.pool.Dir(), rec.Path)
}

func wantCode(t *testing.T, what string, err error, code codes.Code) {
	t.Helper()
	var ce *answer.CodedError
	if !errors.As(err, &ce) || ce.Code != code {
		t.Fatalf("%s: %v, want a coded %s", what, err, code)
	}
}

// A stage binds the volume's directory at the staging path and a publish
// at the target, nosuid and nodev, through a descriptor (never the
// directory's path, which a pod could have changed); asked again as
// before, each is success and binds nothing more.
func TestStageAndPublishBindTheDirectoryOnce(t *testing.T) {
	s := newScene(t)
	ctx := context.Background()
	if used, err := s.node.InUse(s.vol.ID); err != nil || used {
		t.Fatalf("in use before any stage: %v, %v", used, err)
	}
	s.stage(t)
	s.stage(t)
	target := s.target("mount")
	for range 2 {
		if err := s.publish(s.vol, target, false, false); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
	if n := s.fk.Calls("bind"); n != 2 {
		t.Errorf("%d binds for one stage and one publish, each asked twice: %v", n, s.fk.Log())
	}
	for _, l := range s.fk.Log() {
		if strings.HasPrefix(l, "bind ") && !strings.HasPrefix(l, "bind /proc/self/fd/") {
			t.Errorf("bound by path, not through the descriptor: %s", l)
		}
	}
	for _, p := range []string{s.staging, target} {
		m, ok := s.top(t, p)
		if !ok || m.Root != s.volumeDir(t, s.vol) || !slices.Contains(m.Options, "nosuid") || !slices.Contains(m.Options, "nodev") || m.ReadOnly() {
			t.Errorf("at %s: %+v (mounted %v), want a read-write nosuid nodev bind of %s", p, m, ok, s.volumeDir(t, s.vol))
		}
	}
	if used, err := s.node.InUse(s.vol.ID); err != nil || !used {
		t.Errorf("in use while published: %v, %v", used, err)
	}
	// The same volume asked read-only where it is read-write is not it.
	err := s.publish(s.vol, target, true, false)
	wantCode(t, "read-only publish on the read-write target", err, codes.AlreadyExists)
	ro := s.target("ro")
	if err := s.publish(s.vol, ro, true, false); err != nil {
		t.Fatal(err)
	}
	if m, _ := s.top(t, ro); !m.ReadOnly() {
		t.Errorf("read-only publish: %+v", m)
	}
	if _, err := s.node.Stats(ctx, s.vol, target); err != nil {
		t.Errorf("stats of the published volume: %v", err)
	}
}

// Whatever else is mounted at the target (another volume's bind, a
// filesystem filevol does not own) is ALREADY_EXISTS, and left alone.
func TestPublishOnSomethingElseIsAlreadyExists(t *testing.T) {
	s := newScene(t)
	s.stage(t)
	other := s.create(t, "v2")
	taken := s.target("taken")
	if err := s.publish(other, taken, false, false); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "publish on another volume's target", s.publish(s.vol, taken, false, false), codes.AlreadyExists)
	tmpfs := s.target("tmpfs")
	if err := os.Mkdir(tmpfs, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := s.fk.MountAt(tmpfs, "tmpfs", "tmpfs"); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "publish on a tmpfs", s.publish(s.vol, tmpfs, false, false), codes.AlreadyExists)
	wantCode(t, "stage on a tmpfs", func() error {
		_, err := s.node.Stage(context.Background(), s.vol, volume.StageRequest{StagingPath: tmpfs})
		return err
	}(), codes.AlreadyExists)
	if m, _ := s.top(t, taken); m.Root != s.volumeDir(t, other) {
		t.Errorf("the other volume's bind was replaced: %+v", m)
	}
	if m, _ := s.top(t, tmpfs); m.FSType != "tmpfs" {
		t.Errorf("the tmpfs was replaced: %+v", m)
	}
}

// Unstaging a volume still published is FAILED_PRECONDITION (the CO
// unpublishes first) and unmounts nothing; after the unpublish it
// unmounts the staging path, and the volume is no longer in use.
// Unpublish removes the target, and a target already gone is success.
func TestUnstageWaitsForUnpublish(t *testing.T) {
	s := newScene(t)
	ctx := context.Background()
	s.stage(t)
	target := s.target("mount")
	if err := s.publish(s.vol, target, false, false); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "unstage while published", s.node.Unstage(ctx, s.vol.ID, s.staging), codes.FailedPrecondition)
	if _, ok := s.top(t, s.staging); !ok {
		t.Fatal("the refused unstage unmounted the staging path")
	}
	for range 2 {
		if err := s.node.Unpublish(ctx, s.vol.ID, target); err != nil {
			t.Fatalf("unpublish: %v", err)
		}
		if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("target after unpublish: %v", err)
		}
	}
	_, err := s.node.Stats(ctx, s.vol, target)
	wantCode(t, "stats of an unpublished target", err, codes.NotFound)
	for range 2 {
		if err := s.node.Unstage(ctx, s.vol.ID, s.staging); err != nil {
			t.Fatalf("unstage: %v", err)
		}
	}
	if m, ok := s.top(t, s.staging); ok {
		t.Errorf("still mounted at the staging path: %+v", m)
	}
	if used, err := s.node.InUse(s.vol.ID); err != nil || used {
		t.Errorf("in use after unstage: %v, %v", used, err)
	}
}

// An unmount that fails leaves the target for the CO's retry.
func TestUnpublishKeepsTheTargetWhenUnmountFails(t *testing.T) {
	s := newScene(t)
	s.stage(t)
	target := s.target("mount")
	if err := s.publish(s.vol, target, false, false); err != nil {
		t.Fatal(err)
	}
	s.fk.FailOnce("UnmountAll", unix.EBUSY)
	if err := s.node.Unpublish(context.Background(), s.vol.ID, target); !errors.Is(err, unix.EBUSY) {
		t.Fatalf("unpublish with a failing unmount: %v", err)
	}
	if _, ok := s.top(t, target); !ok {
		t.Error("the target is no longer mounted")
	}
	if _, err := os.Stat(target); err != nil {
		t.Errorf("the target was removed: %v", err)
	}
}

// SINGLE_NODE_SINGLE_WRITER: a second target is FAILED_PRECONDITION,
// the same target again is success; other access modes may publish twice.
func TestSingleWriterRefusesASecondTarget(t *testing.T) {
	s := newScene(t)
	s.stage(t)
	first := s.target("first")
	if err := s.publish(s.vol, first, false, true); err != nil {
		t.Fatal(err)
	}
	if err := s.publish(s.vol, first, false, true); err != nil {
		t.Errorf("the same single-writer publish again: %v", err)
	}
	second := s.target("second")
	wantCode(t, "a second single-writer target", s.publish(s.vol, second, false, true), codes.FailedPrecondition)
	if _, ok := s.top(t, second); ok {
		t.Error("the refused publish mounted the second target")
	}
	if err := s.publish(s.vol, second, false, false); err != nil {
		t.Errorf("a second target without single writer: %v", err)
	}
}

// A directory volume has no block access: stage and publish say
// INVALID_ARGUMENT's sentinel and mount nothing.
func TestBlockAccessIsRefused(t *testing.T) {
	s := newScene(t)
	ctx := context.Background()
	_, err := s.node.Stage(ctx, s.vol, volume.StageRequest{StagingPath: s.staging, Block: true})
	if !errors.Is(err, volume.ErrInvalidArgument) {
		t.Errorf("block stage: %v", err)
	}
	err = s.node.Publish(ctx, s.vol, volume.PublishRequest{StagingPath: s.staging, TargetPath: s.target("dev"), Block: true})
	if !errors.Is(err, volume.ErrInvalidArgument) {
		t.Errorf("block publish: %v", err)
	}
	if n := s.fk.Calls("bind"); n != 0 {
		t.Errorf("%d binds", n)
	}
}

// Only binds under the kubelet's directory are this node's: a bind of
// the volume elsewhere (another node's on a shared pool, on this host)
// neither makes it in use nor blocks an unstage or a single writer.
func TestBindsOutsideTheKubeletDirAreNotThisNodes(t *testing.T) {
	s := newScene(t)
	elsewhere := filepath.Join(filepath.Dir(s.kubelet), "other-kubelet")
	if err := os.Mkdir(elsewhere, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := s.fk.Bind(s.volumeDir(t, s.vol), elsewhere, false, nil); err != nil {
		t.Fatal(err)
	}
	if used, err := s.node.InUse(s.vol.ID); err != nil || used {
		t.Errorf("in use by another node's bind: %v, %v", used, err)
	}
	s.stage(t)
	if err := s.publish(s.vol, s.target("mount"), false, true); err != nil {
		t.Errorf("single writer beside another node's bind: %v", err)
	}
}

// A volume whose directory was replaced by a link is not bound, wherever
// the link leads: the directory is opened beneath the pool without
// following one.
func TestStageRefusesADirectoryReplacedByALink(t *testing.T) {
	s := newScene(t)
	dir := s.volumeDir(t, s.vol)
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(s.pod, dir); err != nil {
		t.Fatal(err)
	}
	if _, err := s.node.Stage(context.Background(), s.vol, volume.StageRequest{StagingPath: s.staging}); err == nil {
		t.Fatal("staged a volume whose directory is a link")
	}
	if n := s.fk.Calls("bind"); n != 0 {
		t.Errorf("%d binds: %v", n, s.fk.Log())
	}
}

// Health says the size is not enforced (a plain pool) and, once the
// directory is gone, DirectoryMissing as DATA_LOSS.
func TestHealthReportsAMissingDirectory(t *testing.T) {
	s := newScene(t)
	ctx := context.Background()
	reasons := func() []string {
		t.Helper()
		entries, err := s.node.Health(ctx, s.vol, "", "")
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range entries {
			out = append(out, e.Reason)
			if e.Reason == "DirectoryMissing" && e.Status != csipb.VolumeHealthErrorType_DATA_LOSS {
				t.Errorf("DirectoryMissing is %v", e.Status)
			}
		}
		return out
	}
	if got := reasons(); !slices.Equal(got, []string{volume.ReasonSizeNotEnforced}) {
		t.Errorf("healthy volume of a plain pool: %v", got)
	}
	if err := os.Remove(s.volumeDir(t, s.vol)); err != nil {
		t.Fatal(err)
	}
	if got := reasons(); !slices.Contains(got, "DirectoryMissing") {
		t.Errorf("volume without its directory: %v", got)
	}
}

// The controller grows a directory volume; the node grows nothing, and
// says so when asked for more than the volume has.
func TestExpandRefusesGrowthOnTheNode(t *testing.T) {
	s := newScene(t)
	ctx := context.Background()
	got, err := s.node.Expand(ctx, s.vol, volume.ExpandRequest{RequiredBytes: s.vol.CapacityBytes})
	if err != nil || got != s.vol.CapacityBytes {
		t.Errorf("expand to the size it has: %d, %v", got, err)
	}
	_, err = s.node.Expand(ctx, s.vol, volume.ExpandRequest{RequiredBytes: s.vol.CapacityBytes + 1})
	wantCode(t, "expand past the volume's size", err, codes.FailedPrecondition)
}
