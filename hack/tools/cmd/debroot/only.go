package main

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// onlyFlag is -only PKG=PATH (repeatable): of package PKG the rootfs gets
// PATH alone (and the package's copyright and status file), and the
// libraries are those PATH loads. For a package that ships one program
// among many an image needs (ceph-common: /usr/bin/ceph, a Python
// program, beside 45 MB of other tools and the libraries they load).
type onlyFlag map[string][]string

func (o onlyFlag) String() string { return fmt.Sprint(map[string][]string(o)) }

func (o onlyFlag) Set(v string) error {
	name, p, ok := strings.Cut(v, "=")
	if !ok || name == "" || !path.IsAbs(p) || path.Clean(p) != p || p == "/" {
		return fmt.Errorf("%q: want PACKAGE=/absolute/path", v)
	}
	o[name] = append(o[name], p)
	return nil
}

// prune removes from the extracted package p every file but keep, its
// copyright file and its status file; the directories left empty go too.
// A path of keep the package does not hold is an error (a package that
// moved its program must not give an image without it).
func prune(p *pkg, keep []string) error {
	want := map[string]bool{
		"usr/share/doc/" + p.name + "/copyright": true,
		"var/lib/dpkg/status.d/" + p.name:        true,
	}
	for _, k := range keep {
		rel := strings.TrimPrefix(k, "/")
		if _, err := os.Lstat(filepath.Join(p.dir, rel)); err != nil {
			return fmt.Errorf("-only %s=%s: not in the package: %w", p.name, k, err)
		}
		want[rel] = true
	}
	var files []string
	err := filepath.WalkDir(p.dir, func(f string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(p.dir, f)
		if !want[filepath.ToSlash(rel)] {
			files = append(files, f)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, f := range files {
		if err := os.Remove(f); err != nil {
			return err
		}
	}
	// Empty directories, deepest first (a walk lists parents first).
	var dirs []string
	_ = filepath.WalkDir(p.dir, func(f string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && f != p.dir {
			dirs = append(dirs, f)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		_ = os.Remove(dirs[i]) // fails, as it should, on a directory still holding a kept file
	}
	fmt.Printf("  %s: only %s (%d other files left out)\n", p.name, strings.Join(keep, " "), len(files))
	return nil
}
