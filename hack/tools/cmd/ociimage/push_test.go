package main

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"log"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// platformLayer writes a layer tarball whose one file says which platform it is for.
func platformLayer(t *testing.T, dir, arch string) string {
	t.Helper()
	p := filepath.Join(dir, arch+".tar")
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	body := []byte("built for " + arch + "\n")
	if err := tw.WriteHeader(&tar.Header{Name: "etc/arch", Mode: 0o644, Size: int64(len(body)), ModTime: epoch}); err != nil {
		t.Fatal(err)
	}
	tw.Write(body)
	tw.Close()
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// multiArchTarball writes the kind of tarball `make image` writes: one index,
// linux/amd64 and linux/arm64, named by two tags.
func multiArchTarball(t *testing.T) (string, v1.ImageIndex) {
	t.Helper()
	dir := t.TempDir()
	plats := []platformLayers{
		{platform: v1.Platform{OS: "linux", Architecture: "amd64"}, layers: []string{layerTar(t, dir), platformLayer(t, dir, "amd64")}},
		{platform: v1.Platform{OS: "linux", Architecture: "arm64"}, layers: []string{layerTar(t, dir), platformLayer(t, dir, "arm64")}},
	}
	idx, err := buildIndex(plats, nil, []string{"k=v"}, `["/bin/x"]`, "null", "")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "multi.tar")
	if err := writeLayout(out, idx, []string{"ghcr.io/filevol/filevol:v0.1.0", "ghcr.io/filevol/filevol:dev"}); err != nil {
		t.Fatal(err)
	}
	return out, idx
}

// TestPushIndex: `ociimage push` sends the multi-platform tarball to a
// registry (go-containerregistry's, in process, plain HTTP on 127.0.0.1):
// the index pulled back has the tarball's digest, both platforms, each
// platform's image has its own architecture and layer, a client asking for
// arm64 gets the arm64 image; the digest lines name all three manifests.
func TestPushIndex(t *testing.T) {
	tarPath, idx := multiArchTarball(t)
	srv := httptest.NewServer(registry.New(registry.Logger(nilLogger())))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	ref := host + "/filevol/filevol:v9.9.9"
	digests := filepath.Join(t.TempDir(), "digests.txt")
	var out bytes.Buffer
	if err := push([]string{"-digests", digests, tarPath, ref}, &out); err != nil {
		t.Fatal(err)
	}
	t.Log(out.String())

	want, _ := idx.Digest()
	tag, _ := name.NewTag(ref)
	got, err := remote.Index(tag)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := got.Digest(); d != want {
		t.Fatalf("registry serves index %s, tarball has %s", d, want)
	}
	m, _ := got.IndexManifest()
	if len(m.Manifests) != 2 {
		t.Fatalf("%d manifests in the pushed index", len(m.Manifests))
	}
	for i, arch := range []string{"amd64", "arm64"} {
		d := m.Manifests[i]
		if d.Platform == nil || d.Platform.OS != "linux" || d.Platform.Architecture != arch {
			t.Errorf("manifest %d: platform %v, want linux/%s", i, d.Platform, arch)
		}
		img, err := remote.Image(tag, remote.WithPlatform(v1.Platform{OS: "linux", Architecture: arch}))
		if err != nil {
			t.Fatal(err)
		}
		if id, _ := img.Digest(); id != d.Digest {
			t.Errorf("linux/%s resolves to %s, the index says %s", arch, id, d.Digest)
		}
		cf, _ := img.ConfigFile()
		if cf.Architecture != arch || cf.OS != "linux" || cf.Config.Labels["k"] != "v" {
			t.Errorf("linux/%s config: %s/%s %v", arch, cf.OS, cf.Architecture, cf.Config.Labels)
		}
		ls, _ := img.Layers()
		rc, err := ls[1].Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		tr.Next()
		b, _ := io.ReadAll(tr)
		rc.Close()
		if string(b) != "built for "+arch+"\n" {
			t.Errorf("linux/%s layer holds %q", arch, b)
		}
	}
	lines, _ := os.ReadFile(digests)
	wantLines := host + "/filevol/filevol@" + want.String() + " v9.9.9 index\n" +
		host + "/filevol/filevol@" + m.Manifests[0].Digest.String() + " v9.9.9 linux/amd64\n" +
		host + "/filevol/filevol@" + m.Manifests[1].Digest.String() + " v9.9.9 linux/arm64\n"
	if string(lines) != wantLines {
		t.Errorf("digests file:\n%s\nwant:\n%s", lines, wantLines)
	}
}

// TestPushImage: a single-platform tarball (the sidecars' and the host-arch
// filevol.tar of hack/images.sh) is pushed as an image manifest.
func TestPushImage(t *testing.T) {
	dir := t.TempDir()
	img, err := build([]string{layerTar(t, dir)}, nil, nil, `["/bin/x"]`, "null", "")
	if err != nil {
		t.Fatal(err)
	}
	tarPath := filepath.Join(dir, "one.tar")
	if err := writeLayout(tarPath, img, []string{"registry.k8s.io/sig-storage/csi-x:v1.2.3"}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(registry.New(registry.Logger(nilLogger())))
	defer srv.Close()
	ref := strings.TrimPrefix(srv.URL, "http://") + "/sig-storage/csi-x:v1.2.3"
	if err := push([]string{tarPath, ref}, io.Discard); err != nil {
		t.Fatal(err)
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	got, err := remote.Image(r)
	if err != nil {
		t.Fatal(err)
	}
	if g, _ := got.Digest(); g != mustDigest(t, img) {
		t.Errorf("registry serves %s, tarball has %s", g, mustDigest(t, img))
	}
}

// TestPushUnreachable: nothing listens at the registry's address: the push
// fails, soon, saying which push and what to check.
func TestPushUnreachable(t *testing.T) {
	tarPath, _ := multiArchTarball(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	_, err = pushTarball(ctx, tarPath, []string{addr + "/filevol:v1"}, false, io.Discard)
	if err == nil {
		t.Fatal("push to a closed port succeeded")
	}
	t.Logf("after %v: %v", time.Since(start).Round(time.Millisecond), err)
	for _, s := range []string{"push to " + addr + "/filevol:v1 failed", "connection refused", "is the registry " + addr + " up and reachable"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error lacks %q", s)
		}
	}
	// Bad references are refused before anything is sent.
	for _, ref := range []string{"filevol", addr + "/filevol@sha256:" + strings.Repeat("0", 64)} {
		if _, err := pushTarball(ctx, tarPath, []string{ref}, false, io.Discard); err == nil || !strings.Contains(err.Error(), "want REGISTRY/REPOSITORY:TAG") {
			t.Errorf("%s: %v", ref, err)
		}
	}
}

func mustDigest(t *testing.T, img v1.Image) v1.Hash {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// nilLogger keeps the registry's request log out of the test output.
func nilLogger() *log.Logger { return log.New(io.Discard, "", 0) }
