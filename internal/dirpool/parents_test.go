package dirpool

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/filevol/filevol/internal/volume"
)

// poolLeftovers lists what is in the pool's root besides its own
// .filevol and the names in keep.
func poolLeftovers(t *testing.T, dir string, keep ...string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range ents {
		if e.Name() != metaDir && !slices.Contains(keep, e.Name()) {
			left = append(left, e.Name())
		}
	}
	return left
}

func deleteVolume(t *testing.T, p *Pool, v Volume) {
	t.Helper()
	if err := p.Delete(context.Background(), v.ID); err != nil {
		t.Fatalf("delete %s: %v", v.Path, err)
	}
}

// The directories a create made above its volume go with the delete
// that leaves them empty: a subPathPattern of 300 segments left 299
// behind, a basePath of three its three. A directory the operator made
// stays, and so does every directory above it; a parent another volume
// still uses stays until that one goes.
func TestDeleteRemovesTheDirectoriesItsCreateMade(t *testing.T) {
	p, dir := newPool(t)
	long := create(t, p, "long", 16*mib, map[string]string{ParamSubPathPattern: strings.Repeat("s/", 299) + "${.PV.name}"})
	if n := strings.Count(long.Path, "/"); n != 299 {
		t.Fatalf("path %s: %d directories above the volume, want 299", long.Path, n)
	}
	based := create(t, p, "based", 16*mib, map[string]string{ParamBasePath: "/b1/b2/b3"})
	if !strings.HasPrefix(based.Path, "b1/b2/b3/") {
		t.Fatalf("basePath /b1/b2/b3 gave %s, want it under the pool", based.Path)
	}
	deleteVolume(t, p, long)
	deleteVolume(t, p, based)
	if left := poolLeftovers(t, dir); len(left) != 0 {
		t.Errorf("left in the pool after the deletes: %v", left)
	}

	// The operator's directory, and what is above it, stay.
	must(t, os.MkdirAll(filepath.Join(dir, "ops", "mine"), 0o755))
	op := create(t, p, "op", 16*mib, map[string]string{ParamBasePath: "ops/mine/made/by/pool"})
	deleteVolume(t, p, op)
	if _, err := os.Stat(filepath.Join(dir, "ops", "mine")); err != nil {
		t.Errorf("the operator's directory: %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "ops", "mine")); len(ents) != 0 {
		t.Errorf("the pool's directories under the operator's stayed: %v", ents)
	}

	// Two volumes in one parent: the first delete keeps it.
	shared := map[string]string{ParamBasePath: "team/data"}
	a, b := create(t, p, "a", 16*mib, shared), create(t, p, "b", 16*mib, shared)
	deleteVolume(t, p, a)
	if f, err := p.OpenVolume(b.ID); err != nil {
		t.Fatalf("the other volume in the shared parent: %v", err)
	} else {
		f.Close()
	}
	deleteVolume(t, p, b)
	if left := poolLeftovers(t, dir, "ops"); len(left) != 0 {
		t.Errorf("left in the pool after the deletes: %v", left)
	}
	if err := p.EmptyTrash(); err != nil {
		t.Fatal(err)
	}
	assertClean(t, p, dir, 0)
}

// Creates and deletes under one shared parent of several levels, four at
// a time for a few seconds: a create whose parents a delete removed under
// it makes them again; none fails, and nothing is left.
func TestCreatesAndDeletesShareParentsSafely(t *testing.T) {
	p, dir := newPool(t)
	params := map[string]string{ParamBasePath: "x/y/z", ParamSubPathPattern: "team/${.PV.name}"}
	ctx := context.Background()
	deadline := time.Now().Add(4 * time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	counts := make([]int, 4)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; time.Now().Before(deadline); n++ {
				name := fmt.Sprintf("g%d-%d", g, n)
				if _, err := p.Create(ctx, volume.CreateRequest{Name: name, CapacityBytes: 16 * mib, Parameters: params}); err != nil {
					errs <- fmt.Errorf("create %s: %w", name, err)
					return
				}
				if err := p.Delete(ctx, p.VolumeID(name)); err != nil {
					errs <- fmt.Errorf("delete %s: %w", name, err)
					return
				}
				counts[g]++
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("creates and deletes per goroutine: %v", counts)
	if err := p.EmptyTrash(); err != nil {
		t.Fatal(err)
	}
	assertClean(t, p, dir, 0)
	if left := poolLeftovers(t, dir); len(left) != 0 {
		t.Errorf("left in the pool: %v", left)
	}
}
