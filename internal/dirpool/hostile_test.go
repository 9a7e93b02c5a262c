package dirpool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/volume"
)

// Nothing a claim controls, and no parameter, makes a path that leaves
// the pool, reaches .filevol or is longer than the kernel takes.
func TestParametersRefuseHostileInput(t *testing.T) {
	long := strings.Repeat("a", 256)
	for _, tc := range []struct {
		name   string
		params map[string]string
		want   error
	}{
		{"dotdot basePath", map[string]string{ParamBasePath: "../etc"}, ErrInvalidPath},
		{"dotdot inside basePath", map[string]string{ParamBasePath: "a/../../b"}, ErrInvalidPath},
		{"basePath to metadata", map[string]string{ParamBasePath: ".filevol"}, ErrInvalidPath},
		{"NUL in basePath", map[string]string{ParamBasePath: "a\x00b"}, ErrInvalidPath},
		{"double slash", map[string]string{ParamBasePath: "a//b"}, ErrInvalidPath},
		{"dotdot pattern", map[string]string{ParamSubPathPattern: "../${.PV.name}"}, ErrInvalidPath},
		{"dotdot namespace", map[string]string{ParamSubPathPattern: "${.PVC.namespace}/x", ParamPVCNamespace: ".."}, ErrInvalidPath},
		{"slash in name", map[string]string{ParamSubPathPattern: "${.PVC.name}", ParamPVCName: "a/../../b"}, ErrInvalidPath},
		{"NUL in name", map[string]string{ParamSubPathPattern: "${.PVC.name}", ParamPVCName: "a\x00"}, ErrInvalidPath},
		{"long component", map[string]string{ParamSubPathPattern: long}, ErrInvalidPath},
		{"long name", map[string]string{ParamSubPathPattern: "${.PVC.name}", ParamPVCName: strings.Repeat("b", 254)}, ErrInvalidPath},
		{"unknown placeholder", map[string]string{ParamSubPathPattern: "${.PVC.annotations}"}, ErrInvalidParameter},
		{"unterminated", map[string]string{ParamSubPathPattern: "${.PVC.name"}, ErrInvalidParameter},
		{"missing metadata", map[string]string{ParamSubPathPattern: "${.PVC.namespace}/${.PVC.name}"}, ErrInvalidParameter},
		{"empty pattern", map[string]string{ParamSubPathPattern: "/"}, ErrInvalidParameter},
		{"negative uid", map[string]string{ParamUID: "-1"}, ErrInvalidParameter},
		{"uid -1 as unsigned", map[string]string{ParamGID: "4294967295"}, ErrInvalidParameter},
		{"perms not octal", map[string]string{ParamDirectoryPerms: "799"}, ErrInvalidParameter},
		{"perms too large", map[string]string{ParamDirectoryPerms: "17777"}, ErrInvalidParameter},
		{"range reversed", map[string]string{ParamGIDRangeStart: "10", ParamGIDRangeEnd: "9"}, ErrInvalidParameter},
		{"range from 0", map[string]string{ParamGIDRangeStart: "0"}, ErrInvalidParameter},
		{"ensureUnique not bool", map[string]string{ParamEnsureUnique: "maybe"}, ErrInvalidParameter},
		{"deleteDirectory not bool", map[string]string{ParamDeleteDirectory: "keep"}, ErrInvalidParameter},
		{"unknown", map[string]string{"deleteAccessPointRootDir": "true"}, ErrInvalidParameter},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parameters(tc.params)
			if err == nil {
				_, err = p.Path("pvc-1", "fv1-dir-00000000-0123456789abcdef0123456789abcdef")
			}
			if !errors.Is(err, tc.want) {
				t.Errorf("%v: got %v, want %v", tc.params, err, tc.want)
			}
		})
	}
	p, err := Parameters(map[string]string{ParamBasePath: "/shared/", ParamSubPathPattern: "${.PVC.namespace}/${.PVC.name}",
		ParamPVCNamespace: "ns1", ParamPVCName: "data"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := p.Path("pvc-1", "fv1-dir-00000000-0123456789abcdef0123456789abcdef")
	if err != nil || got != "shared/ns1/data-0123456789abcdef" {
		t.Errorf("Path = %q, %v", got, err)
	}
}

// A class whose pattern uses the claim's metadata is valid without it
// (GetCapacity and ValidateVolumeCapabilities carry none: refusing them
// left csi-provisioner without capacity, so no pod of the class could be
// scheduled); a create without it is refused, naming the flag.
func TestPatternNeedsMetadataOnlyToCreate(t *testing.T) {
	p, err := Parameters(map[string]string{ParamProvisioningMode: ProvisioningModeDirectory, ParamSubPathPattern: "${.PVC.namespace}/${.PVC.name}"})
	if err != nil {
		t.Fatalf("class parameters without the claim's metadata: %v", err)
	}
	if _, err := p.Path("pvc-1", "fv1-dir-00000000-0123456789abcdef0123456789abcdef"); !errors.Is(err, ErrInvalidParameter) ||
		!strings.Contains(err.Error(), "--extra-create-metadata") {
		t.Errorf("create without the claim's metadata: %v", err)
	}
}

// Two claims of the same name in different namespaces never share a
// directory; with ensureUniqueDirectory=false a taken directory is
// refused, naming it, never shared.
func TestNoTwoClaimsShareADirectory(t *testing.T) {
	p, dir := newPool(t)
	pat := map[string]string{ParamSubPathPattern: "${.PVC.namespace}/${.PVC.name}", ParamEnsureUnique: "false"}
	a := create(t, p, "a", 16*mib, with(pat, ParamPVCNamespace, "ns1", ParamPVCName, "data"))
	b := create(t, p, "b", 16*mib, with(pat, ParamPVCNamespace, "ns2", ParamPVCName, "data"))
	if a.Path != "ns1/data" || b.Path != "ns2/data" {
		t.Errorf("paths %q and %q", a.Path, b.Path)
	}
	_, err := p.Create(context.Background(), volume.CreateRequest{Name: "c", CapacityBytes: 16 * mib,
		Parameters: with(pat, ParamPVCNamespace, "ns1", ParamPVCName, "data")})
	if !errors.Is(err, ErrDirectoryExists) || !strings.Contains(err.Error(), "ns1/data") {
		t.Errorf("a second claim on ns1/data: %v, want ErrDirectoryExists", err)
	}
	assertClean(t, p, dir, 2)
}

// A volume is never made inside another (a pod would own its parent),
// nor through a symlink anywhere on its path.
func TestNoEscapeThroughSymlinksOrNesting(t *testing.T) {
	p, dir := newPool(t)
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	_, err := p.Create(context.Background(), volume.CreateRequest{Name: "s", CapacityBytes: 16 * mib,
		Parameters: map[string]string{ParamBasePath: "link"}})
	if !errors.Is(err, ErrInvalidPath) {
		t.Errorf("create through a symlinked basePath: %v, want ErrInvalidPath", err)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("the create wrote outside the pool: %v", ents)
	}
	outer := create(t, p, "outer", 16*mib, map[string]string{ParamSubPathPattern: "nest", ParamEnsureUnique: "false"})
	_, err = p.Create(context.Background(), volume.CreateRequest{Name: "inner", CapacityBytes: 16 * mib,
		Parameters: map[string]string{ParamBasePath: outer.Path}})
	if !errors.Is(err, ErrInvalidPath) {
		t.Errorf("create inside another volume: %v, want ErrInvalidPath", err)
	}
	// A pod that replaces what it owns with symlinks reaches nothing: the
	// volume's root is opened beneath the pool and checked.
	f, err := p.OpenVolume(outer.ID)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	assertClean(t, p, dir, 1)
}

// A delete removes exactly the volume's own subvolume: a directory put
// in its place is refused, not deleted; a volume whose directory was
// moved by hand is not looked for elsewhere.
func TestDeleteRemovesOnlyTheVolume(t *testing.T) {
	p, dir := newPool(t)
	v := create(t, p, "d", 16*mib, nil)
	if _, err := writeFile(filepath.Join(dir, v.Path, "data"), mib); err != nil {
		t.Fatal(err)
	}
	// Replace the subvolume with a plain directory holding precious data.
	if err := os.Rename(filepath.Join(dir, v.Path), filepath.Join(dir, "moved")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, v.Path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, v.Path, "precious"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := p.Delete(context.Background(), v.ID)
	if !errors.Is(err, ErrNotVolume) {
		t.Fatalf("delete of a replaced volume: %v, want ErrNotVolume", err)
	}
	if _, err := os.Stat(filepath.Join(dir, v.Path, "precious")); err != nil {
		t.Errorf("the replacement was touched: %v", err)
	}
	// Put back, the delete works and the trash is emptied.
	if err := os.RemoveAll(filepath.Join(dir, v.Path)); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "moved"), filepath.Join(dir, v.Path)); err != nil {
		t.Fatal(err)
	}
	if err := p.Delete(context.Background(), v.ID); err != nil {
		t.Fatal(err)
	}
	if err := p.Delete(context.Background(), v.ID); err != nil {
		t.Errorf("second delete: %v", err)
	}
	if err := p.EmptyTrash(); err != nil {
		t.Fatal(err)
	}
	assertClean(t, p, dir, 0)
}

func with(m map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

// assertClean checks that the pool holds n volumes and nothing in flight.
func assertClean(t *testing.T, p *Pool, dir string, n int) {
	t.Helper()
	if got := len(p.List()); got != n {
		t.Errorf("%d volumes, want %d", got, n)
	}
	for _, sub := range []string{tmpDir, trashDir, destroyingDir} {
		ents, err := os.ReadDir(filepath.Join(dir, metaDir, sub))
		if err != nil {
			t.Error(err)
		}
		for _, e := range ents {
			t.Errorf("left in %s: %s", sub, e.Name())
		}
	}
}

// A directory on a volume's path replaced by a symlink (to the very same
// place, or elsewhere) is not followed: the volume cannot be opened for a
// bind, nor deleted through it, until the path is plain again.
func TestSymlinkOnAVolumesPathIsNotFollowed(t *testing.T) {
	p, dir := newPool(t)
	v := create(t, p, "v", 16*mib, map[string]string{ParamBasePath: "a/b"})
	if err := os.Rename(filepath.Join(dir, "a"), filepath.Join(dir, "real")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real", filepath.Join(dir, "a")); err != nil {
		t.Fatal(err)
	}
	if f, err := p.OpenVolume(v.ID); err == nil {
		f.Close()
		t.Fatal("OpenVolume followed a symlink on the volume's path")
	}
	if err := p.Delete(context.Background(), v.ID); err == nil {
		t.Fatal("Delete followed a symlink on the volume's path")
	}
	if _, err := os.Stat(filepath.Join(dir, "real", "b", filepath.Base(v.Path))); err != nil {
		t.Errorf("the volume was touched: %v", err)
	}
	if err := os.Remove(filepath.Join(dir, "a")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "real"), filepath.Join(dir, "a")); err != nil {
		t.Fatal(err)
	}
	if err := p.Delete(context.Background(), v.ID); err != nil {
		t.Fatal(err)
	}
}

// A pod may make subvolumes inside its volume (btrfs allows any user to):
// the delete still removes the whole tree, nested ones included.
func TestDeleteDestroysNestedSubvolumes(t *testing.T) {
	p, dir := newPool(t)
	v := create(t, p, "nest", 16*mib, nil)
	vfd, err := p.openVolume(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkdirat(vfd, "deep", 0o755); err != nil {
		t.Fatal(err)
	}
	deep, err := openBeneath(vfd, "deep")
	if err != nil {
		t.Fatal(err)
	}
	if err := createSubvolume(deep, "inner"); err != nil {
		t.Fatal(err)
	}
	inner, err := openBeneath(deep, "inner")
	if err != nil {
		t.Fatal(err)
	}
	if err := createSubvolume(inner, "innermost"); err != nil {
		t.Fatal(err)
	}
	// And one behind more directories than one batch of the walk lists.
	for i := range removeBatch + 3 {
		if err := unix.Mkdirat(vfd, fmt.Sprintf("d%05d", i), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := createSubvolume(vfd, "last"); err != nil {
		t.Fatal(err)
	}
	for _, fd := range []int{inner, deep, vfd} {
		unix.Close(fd)
	}
	if err := p.Delete(context.Background(), v.ID); err != nil {
		t.Fatal(err)
	}
	if err := p.EmptyTrash(); err != nil {
		t.Fatalf("the trash keeps a volume with nested subvolumes: %v", err)
	}
	assertClean(t, p, dir, 0)
}
