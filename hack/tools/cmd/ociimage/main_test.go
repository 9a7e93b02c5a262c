package main

import (
	"archive/tar"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
)

func layerTar(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "layer.tar")
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	body := []byte("#!/bin/true\n")
	if err := tw.WriteHeader(&tar.Header{Name: "bin/x", Mode: 0o755, Size: int64(len(body)), ModTime: epoch}); err != nil {
		t.Fatal(err)
	}
	tw.Write(body)
	tw.Close()
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestWriteLayout: the tarball is an OCI layout with one entry per tag,
// named the way containerd imports it, and the same input gives the same bytes.
func TestWriteLayout(t *testing.T) {
	dir := t.TempDir()
	layer := layerTar(t, dir)
	tags := []string{"registry.k8s.io/sig-storage/csi-x:v1.2.3", "example.com/x:dev"}
	var outs [][]byte
	for i := range 2 {
		img, err := build([]string{layer}, []string{"A=b"}, []string{"k=v"}, `["/bin/x"]`, `["run"]`, "")
		if err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, "img.tar")
		if err := writeLayout(out, img, tags); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(out)
		outs = append(outs, b)
		if i == 0 {
			x := filepath.Join(dir, "x")
			os.Mkdir(x, 0o755)
			if b, err := exec.Command("tar", "-xf", out, "-C", x).CombinedOutput(); err != nil {
				t.Fatalf("tar: %v %s", err, b)
			}
			idx, err := layout.ImageIndexFromPath(x)
			if err != nil {
				t.Fatal(err)
			}
			m, _ := idx.IndexManifest()
			if len(m.Manifests) != 2 {
				t.Fatalf("%d index entries", len(m.Manifests))
			}
			a := m.Manifests[0].Annotations
			if a["io.containerd.image.name"] != tags[0] || a["org.opencontainers.image.ref.name"] != "v1.2.3" {
				t.Errorf("annotations %v", a)
			}
			im, _ := idx.Image(m.Manifests[1].Digest)
			cf, _ := im.ConfigFile()
			if cf.Architecture != "amd64" || cf.Config.Entrypoint[0] != "/bin/x" || cf.Config.Cmd[0] != "run" ||
				cf.Config.Labels["k"] != "v" || cf.Config.Env[1] != "A=b" || !cf.Created.Time.Equal(epoch) {
				t.Errorf("config %+v", cf)
			}
		}
	}
	if !bytes.Equal(outs[0], outs[1]) {
		t.Error("two builds of the same image differ")
	}
}
