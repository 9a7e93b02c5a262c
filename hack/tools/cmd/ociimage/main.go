// Command ociimage writes an OCI image layout tarball (importable with
// `ctr -n k8s.io images import`, `podman load`, `skopeo copy oci-archive:`)
// from uncompressed layer tarballs, with go-containerregistry: no Docker
// daemon, no registry. Output is reproducible: fixed timestamps, layers in
// the order given, one index entry per tag.
//
//	ociimage -o out.tar -layer rootfs.tar [-layer ...] -tag REF [-tag ...]
//	         [-entrypoint '["/x"]'] [-cmd '["y"]'] [-env K=V ...] [-user U]
//
// One image, linux/amd64. With -platform, a multi-platform image (an OCI
// image index, one manifest per platform, what `make image` builds): each
// -platform OS/ARCH starts a platform, and the -layer flags after it are
// that platform's layers; the other flags apply to every platform:
//
//	ociimage -o out.tar -tag REF -platform linux/amd64 -layer a1.tar -layer a2.tar \
//	         -platform linux/arm64 -layer b1.tar -layer b2.tar [flags]
//
// `ociimage push` sends such a tarball to a registry (push.go).
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

// platformLayers is one platform of a multi-platform image and its layers.
type platformLayers struct {
	platform v1.Platform
	layers   []string
}

var amd64 = v1.Platform{OS: "linux", Architecture: "amd64"}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "push" {
		if err := push(os.Args[2:], os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "ociimage push:", err)
			os.Exit(1)
		}
		return
	}
	var tags, env, labels list
	var plats []platformLayers
	multi := false
	out := flag.String("o", "", "output tarball")
	entrypoint := flag.String("entrypoint", "null", "entrypoint as a JSON array")
	cmd := flag.String("cmd", "null", "cmd as a JSON array")
	user := flag.String("user", "", "user (default root)")
	flag.Func("platform", "OS/ARCH: a multi-platform image; the -layer flags that follow are this platform's (repeat)", func(s string) error {
		p, err := v1.ParsePlatform(s)
		if err != nil {
			return err
		}
		if p.OS == "" || p.Architecture == "" {
			return fmt.Errorf("%q is not OS/ARCH", s)
		}
		for _, q := range plats {
			if q.platform.Equals(*p) {
				return fmt.Errorf("platform %s twice", s)
			}
		}
		if !multi {
			if len(plats) > 0 {
				return fmt.Errorf("-layer before the first -platform")
			}
			multi = true
		}
		plats = append(plats, platformLayers{platform: *p})
		return nil
	})
	flag.Func("layer", "uncompressed layer tarball (repeat, bottom first)", func(s string) error {
		if len(plats) == 0 {
			plats = append(plats, platformLayers{platform: amd64})
		}
		plats[len(plats)-1].layers = append(plats[len(plats)-1].layers, s)
		return nil
	})
	flag.Var(&tags, "tag", "image reference to name it (repeat)")
	flag.Var(&env, "env", "KEY=VALUE (repeat; PATH is set)")
	flag.Var(&labels, "label", "KEY=VALUE image label (repeat)")
	flag.Parse()
	if *out == "" || len(plats) == 0 || len(tags) == 0 {
		fmt.Fprintln(os.Stderr, "usage: ociimage -o OUT.tar [-platform OS/ARCH] -layer L.tar... -tag REF... [flags]")
		fmt.Fprintln(os.Stderr, "       ociimage push [-insecure] [-digests FILE] OUT.tar REF...")
		os.Exit(2)
	}
	for _, p := range plats {
		if len(p.layers) == 0 {
			fmt.Fprintf(os.Stderr, "ociimage: platform %s has no -layer\n", p.platform)
			os.Exit(2)
		}
	}
	var err error
	if !multi {
		var img v1.Image
		img, err = build(plats[0].layers, env, labels, *entrypoint, *cmd, *user)
		if err == nil {
			err = writeLayout(*out, img, tags)
		}
		if err == nil {
			err = summary(*out, img, tags)
		}
	} else {
		var idx v1.ImageIndex
		idx, err = buildIndex(plats, env, labels, *entrypoint, *cmd, *user)
		if err == nil {
			err = writeLayout(*out, idx, tags)
		}
		if err == nil {
			err = summaryIndex(*out, idx, tags)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}

// build is the linux/amd64 image of layers.
func build(layers, env, labels list, entrypoint, cmd, user string) (v1.Image, error) {
	return buildFor(amd64, layers, env, labels, entrypoint, cmd, user)
}

// buildIndex is an OCI image index of one image per platform, in the order given.
func buildIndex(plats []platformLayers, env, labels list, entrypoint, cmd, user string) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range plats {
		img, err := buildFor(p.platform, p.layers, env, labels, entrypoint, cmd, user)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.platform, err)
		}
		plat := p.platform
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &plat}})
	}
	return idx, nil
}

func buildFor(plat v1.Platform, layers, env, labels list, entrypoint, cmd, user string) (v1.Image, error) {
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
	cf.Architecture, cf.OS, cf.Variant = plat.Architecture, plat.OS, plat.Variant
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
	layers, compressed, err := layerSizes(img)
	if err != nil {
		return err
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
		baseName(out), d, layers, float64(compressed)/1e6, float64(st.Size())/1e6, strings.Join(tags, " "))
	return nil
}

// layerSizes is how many layers the image has and their compressed bytes.
func layerSizes(img v1.Image) (int, int64, error) {
	ls, err := img.Layers()
	if err != nil {
		return 0, 0, err
	}
	var compressed int64
	for _, l := range ls {
		n, err := l.Size()
		if err != nil {
			return 0, 0, err
		}
		compressed += n
	}
	return len(ls), compressed, nil
}

// summaryIndex prints what was written: the index's digest, and per
// platform the image's digest and compressed size.
func summaryIndex(out string, idx v1.ImageIndex, tags []string) error {
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	st, err := os.Stat(out)
	if err != nil {
		return err
	}
	fmt.Printf("  %s: index %s, tarball %.1f MB: %s\n", baseName(out), d, float64(st.Size())/1e6, strings.Join(tags, " "))
	for _, desc := range m.Manifests {
		img, err := idx.Image(desc.Digest)
		if err != nil {
			return err
		}
		layers, compressed, err := layerSizes(img)
		if err != nil {
			return err
		}
		fmt.Printf("    %-12s %s, %d layers, %.1f MB compressed\n", desc.Platform, desc.Digest, layers, float64(compressed)/1e6)
	}
	return nil
}
