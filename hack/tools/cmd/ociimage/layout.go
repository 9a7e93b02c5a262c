package main

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// writeLayout writes img (a v1.Image, or a v1.ImageIndex: a multi-platform
// image) as an OCI image layout (oci-layout, index.json, blobs/) in a
// tarball at out, with one index entry per tag. containerd names imported
// images after io.containerd.image.name; other tools read
// org.opencontainers.image.ref.name (the tag, as buildkit writes it).
func writeLayout(out string, img any, tags []string) error {
	dir, err := os.MkdirTemp(filepath.Dir(out), ".layout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	for _, t := range tags {
		ref, err := name.ParseReference(t, name.StrictValidation)
		if err != nil {
			return err
		}
		ann := layout.WithAnnotations(map[string]string{
			"io.containerd.image.name":          ref.Name(),
			"org.opencontainers.image.ref.name": ref.Identifier(),
		})
		switch x := img.(type) {
		case v1.Image:
			err = p.AppendImage(x, ann)
		case v1.ImageIndex:
			err = p.AppendIndex(x, ann)
		default:
			err = fmt.Errorf("writeLayout: %T is neither an image nor an index", img)
		}
		if err != nil {
			return err
		}
	}
	return tarDir(dir, out)
}

// tarDir writes the files under dir to out: sorted, owned by 0:0, with
// fixed times, so the same image always gives the same bytes.
func tarDir(dir, out string) error {
	f, err := os.Create(out + ".tmp")
	if err != nil {
		return err
	}
	defer os.Remove(out + ".tmp")
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		info, err := d.Info()
		if err != nil {
			return err
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), ModTime: epoch, Mode: 0o644, Format: tar.FormatPAX}
		if d.IsDir() {
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, h.Name+"/", 0o755
			return tw.WriteHeader(h)
		}
		h.Typeflag, h.Size = tar.TypeReg, info.Size()
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		src, err := os.Open(path)
		if err != nil {
			return err
		}
		defer src.Close()
		_, err = io.Copy(tw, src)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if err == nil {
		err = f.Close()
	}
	if err != nil {
		f.Close()
		return err
	}
	return os.Rename(out+".tmp", out)
}
