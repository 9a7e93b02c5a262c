package imagenode

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/filevol/filevol/internal/answer"
	"github.com/filevol/filevol/internal/hostos"
	"github.com/filevol/filevol/internal/pool"
	"github.com/filevol/filevol/internal/volume"
)

// env is the node half of a pool in dir on the kernel host makes for the
// pool's directory (the fake, or the real one: hostos.New), driven as the
// node service drives it once it has validated, locked and recorded.
type env struct {
	t       *testing.T
	pool    *pool.Pool
	node    *Node
	kubelet string
}

func newEnv(t *testing.T, dir string, host func(poolDir string) hostos.Host) *env {
	t.Helper()
	p, err := pool.Open(filepath.Join(dir, "pool"), pool.Options{NodeID: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return &env{t: t, pool: p, node: New(p, host(p.Dir()), "n1", false), kubelet: filepath.Join(dir, "kubelet")}
}

// volume is a blank volume, its image made at its first stage.
func (e *env) volume(name, fsType string, size int64) string {
	e.t.Helper()
	v, err := e.pool.Create(context.Background(), volume.CreateRequest{Name: name, CapacityBytes: size, FSType: fsType})
	if err != nil {
		e.t.Fatal(err)
	}
	return v.ID
}

// committed is a volume whose image is made, as after a first stage, so
// that a test can put a filesystem in it first.
func (e *env) committed(name, fsType string, size int64) string {
	e.t.Helper()
	id := e.volume(name, fsType, size)
	if _, err := e.pool.CommitImage(e.get(id)); err != nil {
		e.t.Fatal(err)
	}
	return id
}

func (e *env) get(id string) volume.Volume {
	e.t.Helper()
	v, err := e.pool.Get(id)
	if err != nil {
		e.t.Fatal(err)
	}
	return v
}

func (e *env) path(name string) string { return filepath.Join(e.kubelet, name) }

// stage stages the volume with the filesystem its record names (none for
// block access), making the staging directory as kubelet does.
func (e *env) stage(id, staging string, block, readOnly bool) error {
	if err := os.MkdirAll(staging, 0o750); err != nil {
		e.t.Fatal(err)
	}
	fsType := e.get(id).FSType
	if block {
		fsType = ""
	}
	_, err := e.node.Stage(context.Background(), e.get(id), volume.StageRequest{StagingPath: staging, Block: block, FSType: fsType, ReadOnly: readOnly})
	return err
}

func (e *env) mustStage(id, staging string, block, readOnly bool) {
	e.t.Helper()
	if err := e.stage(id, staging, block, readOnly); err != nil {
		e.t.Fatalf("stage %s at %s: %v", id, staging, err)
	}
}

func (e *env) mustPublish(id, staging, target string, block, readOnly bool) {
	e.t.Helper()
	r := volume.PublishRequest{StagingPath: staging, TargetPath: target, Block: block, ReadOnly: readOnly}
	if err := e.node.Publish(context.Background(), e.get(id), r); err != nil {
		e.t.Fatalf("publish %s at %s: %v", id, target, err)
	}
}

// codeOf is the gRPC code a node-half error asks for (a CodedError's),
// Unknown for the others, OK for none.
func codeOf(err error) codes.Code {
	var ce *answer.CodedError
	switch {
	case err == nil:
		return codes.OK
	case errors.As(err, &ce):
		return ce.Code
	}
	return codes.Unknown
}

func wantCoded(t *testing.T, what string, err error, code codes.Code) {
	t.Helper()
	if codeOf(err) != code {
		t.Fatalf("%s: %v, want a coded %s", what, err, code)
	}
}
