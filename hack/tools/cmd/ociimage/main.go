// Command ociimage writes an OCI image layout tarball (importable with
// `ctr -n k8s.io images import`, `podman load`, `skopeo copy oci-archive:`)
// from uncompressed layer tarballs, with go-containerregistry: no Docker
// daemon, no registry. Output is reproducible: fixed timestamps, layers in
// the order given, one index entry per tag.
//
//	ociimage -o out.tar -layer rootfs.tar [-layer ...] -tag REF [-tag ...]
//	         [-entrypoint '["/x"]'] [-cmd '["y"]'] [-env K=V ...] [-user U]
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(s string) error { *l = append(*l, s); return nil }

// epoch is the creation time of every image: builds are reproducible.
var epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func main() {
	var layers, tags, env, labels list
	out := flag.String("o", "", "output tarball")
	entrypoint := flag.String("entrypoint", "null", "entrypoint as a JSON array")
	cmd := flag.String("cmd", "null", "cmd as a JSON array")
	user := flag.String("user", "", "user (default root)")
	flag.Var(&layers, "layer", "uncompressed layer tarball (repeat, bottom first)")
	flag.Var(&tags, "tag", "image reference to name it (repeat)")
	flag.Var(&env, "env", "KEY=VALUE (repeat; PATH is set)")
	flag.Var(&labels, "label", "KEY=VALUE image label (repeat)")
	flag.Parse()
	if *out == "" || len(layers) == 0 || len(tags) == 0 {
		fmt.Fprintln(os.Stderr, "usage: ociimage -o OUT.tar -layer L.tar... -tag REF... [flags]")
		os.Exit(2)
	}
	img, err := build(layers, env, labels, *entrypoint, *cmd, *user)
	if err == nil {
		err = writeLayout(*out, img, tags)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
	if err := summary(*out, img, tags); err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}

func build(layers, env, labels list, entrypoint, cmd, user string) (v1.Image, error) {
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for _, path := range layers {
		l, err := tarball.LayerFromFile(path, tarball.WithMediaType(types.OCILayer))
		if err != nil {
			return nil, fmt.Errorf("layer %s: %w", path, err)
		}
		img, err = mutate.Append(img, mutate.Addendum{Layer: l, History: v1.History{
			Created: v1.Time{Time: epoch}, CreatedBy: "filevol hack/images.sh: " + baseName(path),
		}})
		if err != nil {
			return nil, err
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = "amd64", "linux"
	cf.Created = v1.Time{Time: epoch}
	cf.Config.Env = append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, env...)
	cf.Config.User = user
	cf.Config.WorkingDir = "/"
	if err := json.Unmarshal([]byte(entrypoint), &cf.Config.Entrypoint); err != nil {
		return nil, fmt.Errorf("-entrypoint: %w", err)
	}
	if err := json.Unmarshal([]byte(cmd), &cf.Config.Cmd); err != nil {
		return nil, fmt.Errorf("-cmd: %w", err)
	}
	for _, kv := range labels {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("-label %q is not KEY=VALUE", kv)
		}
		if cf.Config.Labels == nil {
			cf.Config.Labels = map[string]string{}
		}
		cf.Config.Labels[k] = v
	}
	return mutate.ConfigFile(img, cf)
}

func baseName(p string) string { return p[strings.LastIndex(p, "/")+1:] }

// summary prints what was written: digest, sizes, names.
func summary(out string, img v1.Image, tags []string) error {
	d, err := img.Digest()
	if err != nil {
		return err
	}
	ls, err := img.Layers()
	if err != nil {
		return err
	}
	var compressed int64
	for _, l := range ls {
		s, err := l.Size()
		if err != nil {
			return err
		}
		compressed += s
	}
	st, err := os.Stat(out)
	if err != nil {
		return err
	}
	for _, t := range tags {
		if _, err := name.ParseReference(t); err != nil {
			return err
		}
	}
	fmt.Printf("  %s: %s, %d layers, %.1f MB compressed, tarball %.1f MB: %s\n",
		baseName(out), d, len(ls), float64(compressed)/1e6, float64(st.Size())/1e6, strings.Join(tags, " "))
	return nil
}
