// Command debroot assembles a root file system from Debian packages without
// installing them: the requested packages plus exactly the library packages
// their programs load (ELF DT_NEEDED, followed transitively). Candidate
// libraries come from the packages' Depends/Pre-Depends; a candidate that
// no program loads is left out, and a DT_NEEDED that no candidate provides
// is an error. Used by hack/images.sh for the filevol image.
//
//	debroot [-arch amd64|arm64] [-only PKG=PATH]... -debs CACHE -out ROOTFS -list PACKAGES.txt pkg...
//	debroot [-arch amd64|arm64] -check ROOTFS
//
// -arch is the Debian architecture of the packages (what apt is configured
// to download: hack/debian-bookworm.sh --arch) and so where their libraries
// live (/lib/x86_64-linux-gnu, /lib/aarch64-linux-gnu). -check verifies a
// root file system without running anything in it, for an architecture the
// host cannot execute: every ELF file is of that architecture, and its
// interpreter and every DT_NEEDED library resolve inside the root the way
// the dynamic loader would find them (check.go). -only keeps one file of a
// package, and the libraries that file loads (only.go).
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

func main() {
	debs := flag.String("debs", "", "directory that caches downloaded .deb files")
	out := flag.String("out", "", "root file system to create (must not exist)")
	list := flag.String("list", "", "write the included packages and versions here")
	archName := flag.String("arch", "amd64", "Debian architecture: amd64 or arm64")
	check := flag.String("check", "", "check this root file system statically instead of building one")
	flag.Var(only, "only", "PACKAGE=PATH: of PACKAGE keep only PATH (repeatable)")
	flag.Parse()
	a, ok := arches[*archName]
	if !ok {
		fmt.Fprintf(os.Stderr, "debroot: -arch %s: only amd64 and arm64\n", *archName)
		os.Exit(2)
	}
	arch = a
	if *check != "" {
		n, err := checkRoot(*check, arch)
		if err != nil {
			fmt.Fprintln(os.Stderr, "debroot:", err)
			os.Exit(1)
		}
		fmt.Printf("  %s: %d ELF files of %s, every interpreter and DT_NEEDED library resolves inside it\n", *check, n, arch.name)
		return
	}
	if *debs == "" || *out == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: debroot [-arch A] -debs DIR -out ROOTFS [-list FILE] package... | debroot [-arch A] -check ROOTFS")
		os.Exit(2)
	}
	if err := run(*debs, *out, *list, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "debroot:", err)
		os.Exit(1)
	}
}

func run(debDir, out, list string, wanted []string) error {
	if _, err := os.Stat(out); err == nil {
		return fmt.Errorf("%s exists", out)
	}
	if err := os.MkdirAll(debDir, 0o755); err != nil {
		return err
	}
	cands, err := candidates(wanted)
	if err != nil {
		return err
	}
	// Extract every candidate on its own, to know which package owns a file.
	stage := out + ".pkgs"
	defer os.RemoveAll(stage)
	pkgs := map[string]*pkg{}
	for _, name := range cands {
		p, err := fetch(debDir, stage, name)
		if err != nil {
			return err
		}
		if keep, ok := only[name]; ok {
			if err := prune(p, keep); err != nil {
				return err
			}
		}
		pkgs[name] = p
	}
	keep, err := closure(pkgs, wanted)
	if err != nil {
		return err
	}
	var lines []string
	for _, name := range cands {
		if !keep[name] {
			fmt.Printf("  left out %s: nothing in the image loads it\n", name)
			continue
		}
		p := pkgs[name]
		if err := merge(p.dir, out); err != nil {
			return err
		}
		lines = append(lines, fmt.Sprintf("%s %s", p.name, p.version))
	}
	sort.Strings(lines)
	fmt.Printf("  %d packages: %s\n", len(lines), strings.Join(lines, ", "))
	if list != "" {
		return os.WriteFile(list, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
	}
	return nil
}

// candidates walks Depends/Pre-Depends from the wanted packages, following
// only library packages (Section: libs): programs, interpreters and
// maintainer-script tools (debconf, python3, perl, logsave) are not followed.
// Of an "a | b" alternative only the first is taken, as apt would.
func candidates(wanted []string) ([]string, error) {
	seen := map[string]bool{}
	order := []string{}
	queue := slices.Clone(wanted)
	for len(queue) > 0 {
		name := queue[0]
		queue = queue[1:]
		if seen[name] {
			continue
		}
		seen[name] = true
		order = append(order, name)
		c, err := show(name)
		if err != nil {
			return nil, err
		}
		for _, d := range c.deps {
			if seen[d] {
				continue
			}
			dc, err := show(d)
			if err != nil {
				return nil, err
			}
			if dc.section == "libs" {
				queue = append(queue, d)
			}
		}
	}
	return order, nil
}

type control struct {
	version, section string
	deps             []string
}

var shown = map[string]*control{}

// show reads the candidate version's control fields with apt-cache.
func show(name string) (*control, error) {
	if c, ok := shown[name]; ok {
		return c, nil
	}
	outb, err := exec.Command("apt-cache", "show", "--no-all-versions", name).Output()
	if err != nil {
		return nil, fmt.Errorf("apt-cache show %s: %w (run apt-get update?)", name, err)
	}
	c := &control{}
	for _, line := range strings.Split(string(outb), "\n") {
		field, value, ok := strings.Cut(line, ": ")
		switch {
		case !ok:
		case field == "Version":
			c.version = value
		case field == "Section":
			c.section = value
		case field == "Depends" || field == "Pre-Depends":
			for _, group := range strings.Split(value, ",") {
				first, _, _ := strings.Cut(group, "|")
				n := strings.Fields(first)[0]
				if !strings.Contains(n, ":") { // "python3:any" is an interpreter, never a library
					c.deps = append(c.deps, n)
				}
			}
		}
	}
	shown[name] = c
	return c, nil
}

// only is -only: the packages of which one path is kept.
var only = onlyFlag{}

type pkg struct {
	name, version, dir string
}

// fetch downloads name (once, into debDir) and extracts it under stage.
func fetch(debDir, stage, name string) (*pkg, error) {
	c, err := show(name)
	if err != nil {
		return nil, err
	}
	version := c.version
	// The cache holds every architecture's .deb files: take this one's (or
	// an architecture-independent one).
	file := strings.ReplaceAll(fmt.Sprintf("%s_%s_", name, version), ":", "%3a")
	glob := func() []string {
		m, _ := filepath.Glob(filepath.Join(debDir, file+arch.name+".deb"))
		all, _ := filepath.Glob(filepath.Join(debDir, file+"all.deb"))
		return append(m, all...)
	}
	matches := glob()
	if len(matches) == 0 {
		cmd := exec.Command("apt-get", "download", "-q", name+"="+version)
		cmd.Dir = debDir
		if b, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("apt-get download %s: %v\n%s", name, err, b)
		}
		matches = glob()
		if len(matches) != 1 {
			return nil, fmt.Errorf("downloaded %s=%s but found %v", name, version, matches)
		}
	}
	dir := filepath.Join(stage, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if b, err := exec.Command("dpkg-deb", "-x", matches[0], dir).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("dpkg-deb -x %s: %v\n%s", matches[0], err, b)
	}
	// Keep the package's control file, the way distroless images do, so
	// vulnerability scanners know what is inside.
	ctl, err := exec.Command("dpkg-deb", "-f", matches[0]).Output()
	if err != nil {
		return nil, err
	}
	status := filepath.Join(dir, "var/lib/dpkg/status.d")
	if err := os.MkdirAll(status, 0o755); err != nil {
		return nil, err
	}
	ctl = append(bytes.TrimSpace(ctl), []byte("\nStatus: install ok installed\n")...)
	if err := os.WriteFile(filepath.Join(status, name), ctl, 0o644); err != nil {
		return nil, err
	}
	return &pkg{name: name, version: version, dir: dir}, nil
}

// merge copies src over dst with cp -a: modes, symbolic and hard links kept.
func merge(src, dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	if b, err := exec.Command("cp", "-a", "--no-preserve=ownership", src+"/.", dst).CombinedOutput(); err != nil {
		return fmt.Errorf("cp %s: %v\n%s", src, err, b)
	}
	return nil
}
