package cephimage

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
)

var digestPattern = regexp.MustCompile(`^sha256:([0-9a-f]{64})$`)

// unpack extracts the image tarball (an OCI layout of one image, as
// hack/images.sh writes it) into dir/rootfs, its layers in order, as a
// container runtime would (hack/images.sh's layers hold no whiteouts),
// and returns that rootfs. The layout itself is removed after.
func unpack(t *testing.T, image, dir string) string {
	t.Helper()
	oci, root := filepath.Join(dir, "oci"), filepath.Join(dir, "rootfs")
	for _, d := range []string{oci, root} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	defer os.RemoveAll(oci)
	run(t, "tar", "-xf", image, "-C", oci)
	var index struct {
		Manifests []struct{ Digest string } `json:"manifests"`
	}
	readJSON(t, filepath.Join(oci, "index.json"), &index)
	// One entry per tag, all of one image.
	if len(index.Manifests) == 0 {
		t.Fatalf("%s: no manifest in its index", image)
	}
	for _, m := range index.Manifests {
		if m.Digest != index.Manifests[0].Digest {
			t.Fatalf("%s: manifests %s and %s, want the one image hack/images.sh --ceph writes", image, m.Digest, index.Manifests[0].Digest)
		}
	}
	var manifest struct {
		Layers []struct{ Digest, MediaType string } `json:"layers"`
	}
	readJSON(t, blob(t, oci, index.Manifests[0].Digest), &manifest)
	if len(manifest.Layers) == 0 {
		t.Fatalf("%s: no layer", image)
	}
	for _, l := range manifest.Layers {
		run(t, "tar", "--numeric-owner", "-xzf", blob(t, oci, l.Digest), "-C", root)
	}
	return root
}

// blob is the file of digest in the layout at oci.
func blob(t *testing.T, oci, digest string) string {
	t.Helper()
	m := digestPattern.FindStringSubmatch(digest)
	if m == nil {
		t.Fatalf("digest %q is not sha256:<64 hex digits>", digest)
	}
	return filepath.Join(oci, "blobs", "sha256", m[1])
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func run(t *testing.T, prog string, args ...string) {
	t.Helper()
	if out, err := exec.Command(prog, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s", fmt.Sprintf("%s %v: %v: %s", prog, args, err, out))
	}
}
