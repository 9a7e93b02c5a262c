package main

import (
	"archive/tar"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

const pushUsage = `usage: ociimage push [-insecure] [-digests FILE] IMAGE.tar REPOSITORY:TAG...

Pushes the image of an OCI layout tarball (what ociimage writes: a
multi-platform index, with every platform's manifest and layers, or a single
image) to each reference, with go-containerregistry: no Docker daemon.
Credentials come from the default keychain (~/.docker/config.json or
$DOCKER_CONFIG, and its credential helpers: docker login, podman login,
crane auth login, or a config.json written by CI). A registry on localhost or
127.0.0.1 is spoken to in plain HTTP; -insecure allows plain HTTP, and TLS
without certificate verification, for any other.
After each push the registry is asked for the reference's digest, which
must be the tarball's. -digests FILE writes one line per pushed manifest:
"REPOSITORY@DIGEST TAG index|OS/ARCH".
`

// push implements `ociimage push`.
func push(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("push", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), pushUsage); fs.PrintDefaults() }
	insecure := fs.Bool("insecure", false, "allow plain HTTP and unverified TLS (a local registry that is not on localhost)")
	digests := fs.String("digests", "", "write the pushed digests to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() < 2 {
		fs.Usage()
		return errors.New("need a tarball and at least one reference")
	}
	if *digests != "" {
		// A failed push leaves no digests of an earlier one behind.
		if err := os.Remove(*digests); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	lines, err := pushTarball(ctx, fs.Arg(0), fs.Args()[1:], *insecure, stdout)
	if err != nil {
		return err
	}
	if *digests != "" {
		return os.WriteFile(*digests, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
	}
	return nil
}

// pushTarball pushes the one image or index that the layout tarball's
// index.json names (once per tag there) to every ref, then checks what the
// registry serves under ref. It returns the digest lines (see pushUsage).
func pushTarball(ctx context.Context, tarPath string, refs []string, insecure bool, stdout io.Writer) ([]string, error) {
	var nameOpts []name.Option
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}
	if insecure {
		nameOpts = append(nameOpts, name.Insecure)
		t := remote.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} // asked for with -insecure
		opts = append(opts, remote.WithTransport(t))
	}
	var tags []name.Tag
	for _, r := range refs {
		t, err := name.NewTag(r, append(nameOpts, name.StrictValidation)...)
		if err != nil {
			return nil, fmt.Errorf("%q: want REGISTRY/REPOSITORY:TAG: %w", r, err)
		}
		tags = append(tags, t)
	}

	dir, err := os.MkdirTemp("", "ociimage-push-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := untar(tarPath, dir); err != nil {
		return nil, fmt.Errorf("%s: %w", tarPath, err)
	}
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("%s is not an OCI layout tarball: %w", tarPath, err)
	}
	m, err := top.IndexManifest()
	if err != nil {
		return nil, err
	}
	if len(m.Manifests) == 0 {
		return nil, fmt.Errorf("%s: index.json names nothing", tarPath)
	}
	desc := m.Manifests[0]
	for _, d := range m.Manifests[1:] {
		if d.Digest != desc.Digest {
			return nil, fmt.Errorf("%s holds more than one image (%s, %s): push one at a time", tarPath, desc.Digest, d.Digest)
		}
	}

	var lines []string
	for _, tag := range tags {
		var platforms []v1.Descriptor
		switch {
		case desc.MediaType.IsIndex():
			idx, err := top.ImageIndex(desc.Digest)
			if err != nil {
				return nil, err
			}
			im, err := idx.IndexManifest()
			if err != nil {
				return nil, err
			}
			platforms = im.Manifests
			err = remote.WriteIndex(tag, idx, opts...)
			if err != nil {
				return nil, pushError(tag, insecure, err)
			}
		case desc.MediaType.IsImage():
			img, err := top.Image(desc.Digest)
			if err != nil {
				return nil, err
			}
			if err := remote.Write(tag, img, opts...); err != nil {
				return nil, pushError(tag, insecure, err)
			}
		default:
			return nil, fmt.Errorf("%s: %s is neither an image nor an index", tarPath, desc.MediaType)
		}
		got, err := remote.Head(tag, opts...)
		if err != nil {
			return nil, fmt.Errorf("pushed %s, but asking for it again failed: %w", tag, err)
		}
		if got.Digest != desc.Digest {
			return nil, fmt.Errorf("pushed %s as %s, but the registry serves %s", tag, desc.Digest, got.Digest)
		}
		repo := tag.Context().Name()
		what := "image"
		if desc.MediaType.IsIndex() {
			what = "index"
		}
		fmt.Fprintf(stdout, "pushed %s (%s %s)\n", tag, what, desc.Digest)
		lines = append(lines, fmt.Sprintf("%s@%s %s %s", repo, desc.Digest, tag.TagStr(), what))
		for _, p := range platforms {
			fmt.Fprintf(stdout, "  %-12s %s@%s\n", p.Platform, repo, p.Digest)
			lines = append(lines, fmt.Sprintf("%s@%s %s %s", repo, p.Digest, tag.TagStr(), p.Platform))
		}
	}
	return lines, nil
}

// pushError says which push failed and, when the registry could not be
// reached, what to check.
func pushError(tag name.Tag, insecure bool, err error) error {
	msg := fmt.Sprintf("push to %s failed: %v", tag, err)
	var terr interface{ Temporary() bool }
	if strings.Contains(err.Error(), "connection refused") || strings.Contains(err.Error(), "no such host") ||
		strings.Contains(err.Error(), "server gave HTTP response to HTTPS client") || errors.As(err, &terr) {
		msg += fmt.Sprintf(" (is the registry %s up and reachable?", tag.Context().RegistryStr())
		if !insecure {
			msg += " a plain-HTTP registry not on localhost needs -insecure, INSECURE=1 with make push"
		}
		msg += ")"
	}
	return errors.New(msg)
}

// untar extracts the regular files and directories of an OCI layout
// tarball into dir (nothing else is in one; names may not leave dir).
func untar(tarPath, dir string) error {
	f, err := os.Open(tarPath)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(p, filepath.Clean(dir)+string(filepath.Separator)) {
			return fmt.Errorf("%q leaves the layout", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			w, err := os.Create(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(w, tr)
			if cerr := w.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
	}
}
