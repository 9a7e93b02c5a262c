package main

import (
	"debug/elf"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
)

// archInfo is what differs between the Debian architectures an image is
// built for: the multiarch triplet of the library directories, the ELF
// machine, the dynamic loader.
type archInfo struct {
	name, triplet string
	machine       elf.Machine
	loader        string // PT_INTERP of the programs
}

var arches = map[string]archInfo{
	"amd64": {"amd64", "x86_64-linux-gnu", elf.EM_X86_64, "/lib64/ld-linux-x86-64.so.2"},
	"arm64": {"arm64", "aarch64-linux-gnu", elf.EM_AARCH64, "/lib/ld-linux-aarch64.so.1"},
}

// arch is the architecture of this run (-arch).
var arch = arches["amd64"]

// libDirs are where packages put shared objects on Debian for a (multiarch
// directories first). gconv modules find their helper libraries next to
// themselves.
func libDirs(a archInfo) []string {
	return []string{"lib/" + a.triplet, "usr/lib/" + a.triplet, "lib64", "usr/lib64", "lib", "usr/lib",
		"usr/lib/" + a.triplet + "/gconv"}
}

// closure returns the packages to keep: the wanted ones, and every library
// package that owns a shared object one of their ELF files needs (directly
// or through another library). It fails when a needed object has no owner.
func closure(pkgs map[string]*pkg, wanted []string) (map[string]bool, error) {
	owner := map[string]string{} // soname (base name) -> package
	for name, p := range pkgs {
		for _, d := range libDirs(arch) {
			entries, _ := filepath.Glob(filepath.Join(p.dir, d, "*.so*"))
			for _, e := range entries {
				if _, dup := owner[filepath.Base(e)]; !dup {
					owner[filepath.Base(e)] = name
				}
			}
		}
	}
	// Then the private directories a program reaches through its RUNPATH
	// (librados2's /usr/lib/<triplet>/ceph/libceph-common.so.2): a name
	// found in the standard directories above keeps that owner.
	for name, p := range pkgs {
		for _, e := range privateLibs(p.dir) {
			if _, dup := owner[e]; !dup {
				owner[e] = name
			}
		}
	}
	keep := map[string]bool{}
	var missing []string
	var visit func(name string) error
	visit = func(name string) error {
		if keep[name] {
			return nil
		}
		keep[name] = true
		needs, err := needed(pkgs[name].dir)
		if err != nil {
			return err
		}
		for so, users := range needs {
			o, ok := owner[so]
			if !ok {
				missing = append(missing, fmt.Sprintf("%s (needed by %s from %s)", so, users, name))
				continue
			}
			if err := visit(o); err != nil {
				return err
			}
		}
		return nil
	}
	for _, w := range wanted {
		if err := visit(w); err != nil {
			return nil, err
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return nil, fmt.Errorf("no candidate package provides:\n  %s", strings.Join(missing, "\n  "))
	}
	return keep, nil
}

// privateLibs lists the base names of the shared objects in the
// subdirectories of dir's library directories (usr/lib/<triplet>/ceph).
func privateLibs(dir string) []string {
	standard := map[string]bool{}
	for _, d := range libDirs(arch) {
		standard[filepath.Join(dir, d)] = true
	}
	var names []string
	for _, d := range []string{"lib", "usr/lib"} {
		_ = filepath.WalkDir(filepath.Join(dir, d), func(path string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() || standard[filepath.Dir(path)] {
				return nil
			}
			if b := e.Name(); strings.HasSuffix(b, ".so") || strings.Contains(b, ".so.") {
				names = append(names, b)
			}
			return nil
		})
	}
	return names
}

// needed maps each DT_NEEDED soname and ELF interpreter of the regular
// files under dir to one file that needs it.
func needed(dir string) (map[string]string, error) {
	needs := map[string]string{}
	err := walkELF(dir, func(path string, f *elf.File) error {
		rel, _ := filepath.Rel(dir, path)
		libs, err := f.ImportedLibraries()
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		for _, l := range libs {
			needs[l] = rel
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				if interp, err := readInterp(p); err == nil {
					needs[filepath.Base(interp)] = rel
				}
			}
		}
		return nil
	})
	return needs, err
}

// walkELF calls fn for every regular file under dir that opens as an ELF
// file (other files are passed over), with its path and the open file.
func walkELF(dir string, fn func(path string, f *elf.File) error) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		f, err := elf.Open(path)
		if err != nil {
			return nil // not an ELF file
		}
		defer f.Close()
		return fn(path, f)
	})
}

// readInterp returns the path a PT_INTERP program header names.
func readInterp(p *elf.Prog) (string, error) {
	b := make([]byte, p.Filesz)
	if _, err := p.ReadAt(b, 0); err != nil {
		return "", err
	}
	return strings.TrimRight(string(b), "\x00"), nil
}
