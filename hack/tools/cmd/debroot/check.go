package main

import (
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// checkRoot verifies root without executing anything in it, so that it
// works for an architecture the host cannot run (no qemu): every ELF file
// under root is for a's machine, every program's interpreter (PT_INTERP)
// exists inside root, and every DT_NEEDED of every ELF file (programs and
// libraries: that covers the transitive closure) is found where glibc's
// loader would look without an ld.so.cache (the image has none): the file's
// DT_RPATH (without DT_RUNPATH), DT_RUNPATH, then the default directories,
// which on Debian are the multiarch ones first. Symbolic links are followed
// inside root (an absolute target is relative to root). It returns the
// number of ELF files checked.
func checkRoot(root string, a archInfo) (int, error) {
	var problems []string
	n := 0
	err := walkELF(root, func(p string, f *elf.File) error {
		rel := "/" + strings.TrimPrefix(filepath.ToSlash(strings.TrimPrefix(p, root)), "/")
		if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
			return nil // object files, kernel modules: nothing loads them here
		}
		n++
		if f.Machine != a.machine {
			problems = append(problems, fmt.Sprintf("%s: %s, not %s", rel, f.Machine, a.machine))
			return nil
		}
		for _, prog := range f.Progs {
			if prog.Type != elf.PT_INTERP {
				continue
			}
			interp, err := readInterp(prog)
			if err != nil {
				return fmt.Errorf("%s: PT_INTERP: %w", rel, err)
			}
			if _, err := resolveIn(root, interp); err != nil {
				problems = append(problems, fmt.Sprintf("%s: interpreter %s: %v", rel, interp, err))
			}
		}
		libs, err := f.ImportedLibraries()
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		dirs := searchDirs(f, path.Dir(rel), a)
		for _, l := range libs {
			if !findLib(root, l, dirs) {
				problems = append(problems, fmt.Sprintf("%s: %s not found in %s", rel, l, strings.Join(dirs, ":")))
			}
		}
		return nil
	})
	if err != nil {
		return n, err
	}
	if n == 0 {
		return 0, fmt.Errorf("%s: no ELF file", root)
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return n, fmt.Errorf("%d problems:\n  %s", len(problems), strings.Join(problems, "\n  "))
	}
	return n, nil
}

// searchDirs is the loader's search path for the DT_NEEDED entries of f,
// which lives in directory origin (for $ORIGIN).
func searchDirs(f *elf.File, origin string, a archInfo) []string {
	var dirs []string
	expand := func(list []string) {
		for _, l := range list {
			for _, d := range strings.Split(l, ":") {
				d = strings.ReplaceAll(strings.ReplaceAll(d, "${ORIGIN}", origin), "$ORIGIN", origin)
				if d != "" {
					dirs = append(dirs, d)
				}
			}
		}
	}
	runpath, _ := f.DynString(elf.DT_RUNPATH)
	if len(runpath) == 0 {
		rpath, _ := f.DynString(elf.DT_RPATH)
		expand(rpath)
	}
	expand(runpath)
	dirs = append(dirs, "/lib/"+a.triplet, "/usr/lib/"+a.triplet)
	if a.name == "amd64" {
		dirs = append(dirs, "/lib64", "/usr/lib64")
	}
	return append(dirs, "/lib", "/usr/lib")
}

func findLib(root, name string, dirs []string) bool {
	if strings.Contains(name, "/") {
		_, err := resolveIn(root, name)
		return err == nil
	}
	for _, d := range dirs {
		if p, err := resolveIn(root, path.Join(d, name)); err == nil {
			if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
				return true
			}
		}
	}
	return false
}

// resolveIn resolves the absolute path p inside root as a process chrooted
// there would: symbolic links followed component by component, absolute
// targets taken from root, ".." never above root. It returns the host path
// of a file that exists.
func resolveIn(root, p string) (string, error) {
	todo := strings.Split(strings.TrimPrefix(path.Clean("/"+p), "/"), "/")
	cur := "/"
	for hops := 0; len(todo) > 0; {
		c := todo[0]
		todo = todo[1:]
		if c == "" || c == "." {
			continue
		}
		if c == ".." {
			cur = path.Dir(cur)
			continue
		}
		next := path.Join(cur, c)
		host := filepath.Join(root, filepath.FromSlash(next))
		st, err := os.Lstat(host)
		if err != nil {
			return "", errors.New("missing")
		}
		if st.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		if hops++; hops > 40 {
			return "", errors.New("too many symbolic links")
		}
		target, err := os.Readlink(host)
		if err != nil {
			return "", err
		}
		if strings.HasPrefix(target, "/") {
			cur = "/"
		}
		todo = append(strings.Split(target, "/"), todo...)
	}
	return filepath.Join(root, filepath.FromSlash(cur)), nil
}
