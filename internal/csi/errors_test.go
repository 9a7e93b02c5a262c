package csi

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/filevol/filevol/internal/attach"
	"github.com/filevol/filevol/internal/dirpool"
	"github.com/filevol/filevol/internal/freeze"
	"github.com/filevol/filevol/internal/hostos/cgroup"
	"github.com/filevol/filevol/internal/hostos/extents"
	hostfs "github.com/filevol/filevol/internal/hostos/fs"
	"github.com/filevol/filevol/internal/hostos/fscrypt"
	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/hostos/mount"
	"github.com/filevol/filevol/internal/hostos/ofd"
	"github.com/filevol/filevol/internal/nodestate"
	"github.com/filevol/filevol/internal/pool"
	"github.com/filevol/filevol/internal/testutil"
	"github.com/filevol/filevol/internal/volid"
	"github.com/filevol/filevol/internal/volume"
)

func TestToStatus(t *testing.T) {
	wrap := func(e error) error { return fmt.Errorf("stage vol-1: attach /pool/x.img: %w", e) }
	cases := []struct {
		err  error
		code codes.Code
	}{
		{nil, codes.OK},
		{invalidArgument("bad %s", "x"), codes.InvalidArgument},
		{wrap(volume.ErrNotFound), codes.NotFound},
		{wrap(volume.ErrInvalidID), codes.NotFound},
		{wrap(volume.ErrAlreadyExists), codes.AlreadyExists},
		{wrap(volume.ErrNoSpace), codes.ResourceExhausted},
		{wrap(loop.ErrNoDevice), codes.ResourceExhausted},
		{wrap(loop.ErrBusy), codes.FailedPrecondition},
		{wrap(mount.ErrInvalidOption), codes.InvalidArgument},
		{wrap(hostfs.ErrToolMissing), codes.FailedPrecondition},
		{wrap(volume.ErrInvalidArgument), codes.InvalidArgument},
		{wrap(context.DeadlineExceeded), codes.DeadlineExceeded},
		{wrap(context.Canceled), codes.Canceled},
		{errors.New("something nobody named"), codes.Internal},
		{status.Error(codes.Unknown, "unknown from below"), codes.Internal},
		{status.Error(codes.Unavailable, "kept"), codes.Unavailable},
		{fmt.Errorf("wrapped coded: %w", aborted("busy")), codes.Aborted},
	}
	for _, c := range cases {
		got := toStatus(c.err)
		if status.Code(got) != c.code {
			t.Errorf("toStatus(%v) = %v, want %v", c.err, status.Code(got), c.code)
		}
		if c.err != nil && status.Convert(got).Message() == "" {
			t.Errorf("toStatus(%v) lost the message", c.err)
		}
	}
	// The message keeps the context the handler added.
	msg := status.Convert(toStatus(wrap(volume.ErrNotFound))).Message()
	if msg != "stage vol-1: attach /pool/x.img: volume not found" {
		t.Errorf("message %q", msg)
	}
}

func TestInflight(t *testing.T) {
	f := newInflight()
	unlockA, err := f.tryLock("a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.tryLock("a"); status.Code(toStatus(err)) != codes.Aborted {
		t.Fatalf("second lock of a: %v, want ABORTED", err)
	}
	// All-or-nothing: b must stay free when a is busy.
	if _, err := f.tryLock("b", "a"); err == nil {
		t.Fatal("locked b+a while a was busy")
	}
	unlockB, err := f.tryLock("b")
	if err != nil {
		t.Fatalf("b not released after failed multi-lock: %v", err)
	}
	unlockA()
	unlockB()
	if _, err := f.tryLock("a", "b"); err != nil {
		t.Fatalf("a+b after release: %v", err)
	}
}

// sentinelPackages are the directories whose exported Err* variables can
// reach toStatus: the pool, the node markers and every hostos package.
var sentinelPackages = []string{"../dirpool", "../pool", "../volume", "../nodestate", "../hostos", "../freeze", "../volid", "../inuse", "../attach"}

// sentinelValues are the values of the Err* variables the source holds,
// by package name and variable name (a test cannot look a value up by
// name, so the table is kept by hand; TestEverySentinelHasACode says what
// is missing from it).
var sentinelValues = map[string]error{
	"dirpool.ErrNotBtrfs":          dirpool.ErrNotBtrfs,
	"dirpool.ErrInvalidParameter":  dirpool.ErrInvalidParameter,
	"dirpool.ErrInvalidPath":       dirpool.ErrInvalidPath,
	"dirpool.ErrGIDRangeExhausted": dirpool.ErrGIDRangeExhausted,
	"dirpool.ErrDirectoryExists":   dirpool.ErrDirectoryExists,
	"dirpool.ErrNotVolume":         dirpool.ErrNotVolume,
	"dirpool.ErrNoQuota":           dirpool.ErrNoQuota,
	"dirpool.ErrNoSnapshots":       dirpool.ErrNoSnapshots,
	"dirpool.ErrSnapshotDataGone":  dirpool.ErrSnapshotDataGone,
	"dirpool.ErrSnapshotRefused":   dirpool.ErrSnapshotRefused,
	"volume.ErrNotFound":           volume.ErrNotFound,
	"volume.ErrAlreadyExists":      volume.ErrAlreadyExists,
	"volume.ErrNoSpace":            volume.ErrNoSpace,
	"volume.ErrInvalidID":          volume.ErrInvalidID,
	"volume.ErrNoFenceCredentials": volume.ErrNoFenceCredentials,
	"volume.ErrInvalidArgument":    volume.ErrInvalidArgument,
	"volume.ErrSnapshotNotFound":   volume.ErrSnapshotNotFound,
	"volume.ErrGroupNotFound":      volume.ErrGroupNotFound,
	"volume.ErrInGroup":            volume.ErrInGroup,
	"pool.ErrOtherNode":            pool.ErrOtherNode,
	"volume.ErrImageMissing":       volume.ErrImageMissing,
	"volume.ErrShrink":             volume.ErrShrink,
	"nodestate.ErrNoSpace":         nodestate.ErrNoSpace,
	"loop.ErrNotFound":             loop.ErrNotFound,
	"loop.ErrBusy":                 loop.ErrBusy,
	"loop.ErrLocked":               loop.ErrLocked,
	"ofd.ErrHeld":                  ofd.ErrHeld,
	"fscrypt.ErrNotSupported":      fscrypt.ErrNotSupported,
	"fscrypt.ErrOtherPolicy":       fscrypt.ErrOtherPolicy,
	"fscrypt.ErrNotEmpty":          fscrypt.ErrNotEmpty,
	"fscrypt.ErrKeySize":           fscrypt.ErrKeySize,
	"attach.ErrAttachedElsewhere":  attach.ErrAttachedElsewhere,
	"attach.ErrIncompatible":       attach.ErrIncompatible,
	"attach.ErrNotAttached":        attach.ErrNotAttached,
	"attach.ErrCorrupt":            attach.ErrCorrupt,
	"loop.ErrNoDevice":             loop.ErrNoDevice,
	"extents.ErrUnsupported":       extents.ErrUnsupported,
	"mount.ErrNotMounted":          mount.ErrNotMounted,
	"mount.ErrTableFull":           mount.ErrTableFull,
	"mount.ErrInvalidOption":       mount.ErrInvalidOption,
	"fs.ErrUnsupported":            hostfs.ErrUnsupported,
	"fs.ErrToolMissing":            hostfs.ErrToolMissing,
	"fs.ErrNotMountPoint":          hostfs.ErrNotMountPoint,
	"fs.ErrCapability":             hostfs.ErrCapability,
	"fs.ErrInUse":                  hostfs.ErrInUse,
	"fs.ErrNoSuperblock":           hostfs.ErrNoSuperblock,
	"volid.ErrInvalid":             volid.ErrInvalid,
	"freeze.ErrBusy":               freeze.ErrBusy,
	"freeze.ErrNodeUnavailable":    freeze.ErrNodeUnavailable,
	"freeze.ErrNoSpace":            freeze.ErrNoSpace,
	"freeze.ErrFailed":             freeze.ErrFailed,
	"cgroup.ErrPodNotFound":        cgroup.ErrPodNotFound,
}

// exportedSentinels parses the non-test Go files under dirs and returns
// every package-level exported variable named Err*, as "pkg.ErrName" →
// the file that declares it.
func exportedSentinels(t *testing.T, dirs []string) map[string]string {
	t.Helper()
	found := map[string]string{}
	fset := token.NewFileSet()
	for _, root := range dirs {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			for _, decl := range f.Decls {
				gen, ok := decl.(*ast.GenDecl)
				if !ok || gen.Tok != token.VAR {
					continue
				}
				for _, spec := range gen.Specs {
					for _, name := range spec.(*ast.ValueSpec).Names {
						if strings.HasPrefix(name.Name, "Err") && name.IsExported() {
							found[f.Name.Name+"."+name.Name] = path
						}
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("parse %s: %v", root, err)
		}
	}
	return found
}

// TestEverySentinelHasACode: an error a lower layer names must reach the CO
// with a code that says what to do. One missing from sentinelCodes is
// INTERNAL: the pool's refusals of a bad request were, until
// ErrInvalidArgument was mapped.
func TestEverySentinelHasACode(t *testing.T) {
	found := exportedSentinels(t, sentinelPackages)
	if len(found) < len(sentinelValues)/2 {
		t.Fatalf("found only %d Err* variables under %v: is the test run from internal/csi?", len(found), sentinelPackages)
	}
	names := make([]string, 0, len(found))
	for name := range found {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		val, ok := sentinelValues[name]
		if !ok {
			t.Errorf("%s declares %s: add %s to the table (sentinelValues) and to sentinelCodes", found[name], name, name)
			continue
		}
		mapped := false
		for _, m := range sentinelCodes {
			// Itself, or its class (volume.NewError).
			if errors.Is(val, m.err) {
				mapped = true
			}
		}
		code := status.Code(toStatus(fmt.Errorf("some handler: %w", val)))
		switch {
		case !mapped:
			t.Errorf("%s has no entry in sentinelCodes: add one with the code the CO should see", name)
		case code == codes.Internal || code == codes.Unknown:
			t.Errorf("%s maps to %v: give it a code that tells the CO what to do", name, code)
		}
	}
	for name := range sentinelValues {
		if _, ok := found[name]; !ok {
			t.Errorf("%s is in the table but no longer declared under %v: remove it", name, sentinelPackages)
		}
	}
}

// Named errors get the codes the CO expects, alone or wrapped, and their
// message as it is: the kinds' own errors by their classes, the codes the
// CO saw when the map named each.
func TestNamedErrorsKeepTheirCodes(t *testing.T) {
	for err, want := range map[error]codes.Code{
		volume.ErrSnapshotNotFound:   codes.NotFound,
		volume.ErrShrink:             codes.OutOfRange,
		volume.ErrImageMissing:       codes.FailedPrecondition,
		dirpool.ErrNotBtrfs:          codes.FailedPrecondition,
		dirpool.ErrInvalidParameter:  codes.InvalidArgument,
		dirpool.ErrInvalidPath:       codes.InvalidArgument,
		dirpool.ErrGIDRangeExhausted: codes.ResourceExhausted,
		dirpool.ErrDirectoryExists:   codes.AlreadyExists,
		dirpool.ErrNotVolume:         codes.FailedPrecondition,
		dirpool.ErrNoQuota:           codes.FailedPrecondition,
		dirpool.ErrNoSnapshots:       codes.FailedPrecondition,
		dirpool.ErrSnapshotDataGone:  codes.FailedPrecondition,
		dirpool.ErrSnapshotRefused:   codes.FailedPrecondition,
		pool.ErrOtherNode:            codes.InvalidArgument,
	} {
		if got := status.Code(toStatus(err)); got != want {
			t.Errorf("toStatus(%v) = %v, want %v", err, got, want)
		}
		wrapped := fmt.Errorf("create volume x: %w", err)
		if got := status.Code(toStatus(wrapped)); got != want {
			t.Errorf("%v: code %v, want %v", err, got, want)
		}
		if msg := status.Convert(toStatus(wrapped)).Message(); msg != wrapped.Error() {
			t.Errorf("%v: message %q, want %q (a class adds no words)", err, msg, wrapped.Error())
		}
	}
}

// What the pool refuses in a request is INVALID_ARGUMENT, as the pool
// answers it (not as the service's own checks would).
func TestPoolRefusalsAreInvalidArgument(t *testing.T) {
	p, err := pool.Open(t.TempDir(), pool.Options{NodeID: "node"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, req := range []volume.CreateRequest{
		{Name: "", CapacityBytes: 1 << 20},
		{Name: "nul\x00", CapacityBytes: 1 << 20},
		{Name: "zero", CapacityBytes: 0},
		{Name: "prov", CapacityBytes: 1 << 20, Provisioning: "thickish"},
		{Name: "src", CapacityBytes: 1 << 20, Source: &volume.ContentSource{Kind: "backup", ID: "x"}},
	} {
		_, err := p.Create(context.Background(), req)
		if code := status.Code(toStatus(err)); code != codes.InvalidArgument {
			t.Errorf("pool.Create(%+q): %v → %v, want INVALID_ARGUMENT", req.Name, err, code)
		}
	}
}

// Thick provisioning on a pool whose filesystem cannot preallocate (ext4
// without extents: fallocate is EOPNOTSUPP) is the CO's choice of class
// that cannot be honoured here: INVALID_ARGUMENT from CreateVolume, not
// INTERNAL.
func TestCreateVolumeThickWithoutPreallocation(t *testing.T) {
	testutil.RequireRoot(t)
	for _, tool := range []string{"mkfs.ext4", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	dir := testutil.Scratch(t, "csi-errors")
	img, mnt := filepath.Join(dir, "fs.img"), filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 64<<20); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"mkfs.ext4", "-q", "-F", "-O", "^extent,^64bit", img},
		{"mount", "-o", "loop", img, mnt},
	} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v: %s", args, err, out)
		}
	}
	// Scratch's cleanup unmounts and detaches what is left under dir.
	p, err := pool.Open(filepath.Join(mnt, "pool"), pool.Options{NodeID: "node"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	svc := newControllerService(Config{NodeID: "node"}, p)
	_, err = svc.CreateVolume(context.Background(), &csipb.CreateVolumeRequest{
		Name:          "thick",
		CapacityRange: &csipb.CapacityRange{RequiredBytes: 8 << 20},
		Parameters:    map[string]string{ParamProvisioning: volume.ProvisioningThick},
		VolumeCapabilities: []*csipb.VolumeCapability{{
			AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
			AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		}},
	})
	if codeOf(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "cannot preallocate") {
		t.Fatalf("thick CreateVolume on a pool without fallocate: %v, want INVALID_ARGUMENT saying it cannot preallocate", err)
	}
	if vols := p.List(); len(vols) != 0 {
		t.Errorf("the refused create left %v", vols)
	}
}
