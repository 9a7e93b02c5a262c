package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// hostRoot builds a root from the host's /bin/ls and the libraries it loads
// (Debian amd64 paths; the test skips elsewhere), the loader reached through
// an absolute symbolic link as in the image.
func hostRoot(t *testing.T) string {
	t.Helper()
	files := []string{"/bin/ls", "/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libselinux.so.1",
		"/lib/x86_64-linux-gnu/libpcre2-8.so.0", "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"}
	root := t.TempDir()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Skipf("not a Debian amd64 host: %v", err)
		}
		dst := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.MkdirAll(filepath.Join(root, "lib64"), 0o755)
	if err := os.Symlink("/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", filepath.Join(root, "lib64/ld-linux-x86-64.so.2")); err != nil {
		t.Fatal(err)
	}
	return root
}

// TestCheckRoot: the static check accepts a root whose programs' loader and
// libraries (transitively: libpcre2 is libselinux's, not ls's) resolve
// inside it, and names what is wrong otherwise: a library missing, the
// loader's link pointing out of the root, files of another architecture.
func TestCheckRoot(t *testing.T) {
	root := hostRoot(t)
	n, err := checkRoot(root, arches["amd64"])
	if err != nil || n != 5 {
		t.Fatalf("checkRoot: %d files, %v", n, err)
	}
	if _, err := checkRoot(root, arches["arm64"]); err == nil || !strings.Contains(err.Error(), "/bin/ls: EM_X86_64, not EM_AARCH64") {
		t.Errorf("amd64 files checked as arm64: %v", err)
	}

	os.Remove(filepath.Join(root, "lib/x86_64-linux-gnu/libpcre2-8.so.0"))
	_, err = checkRoot(root, arches["amd64"])
	if err == nil || !strings.Contains(err.Error(), "/lib/x86_64-linux-gnu/libselinux.so.1: libpcre2-8.so.0 not found") {
		t.Errorf("missing library: %v", err)
	}

	// The host has /lib/x86_64-linux-gnu/ld-linux-x86-64.so.2: a link that
	// only resolves outside the root does not count.
	root = hostRoot(t)
	os.Remove(filepath.Join(root, "lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"))
	_, err = checkRoot(root, arches["amd64"])
	if err == nil || !strings.Contains(err.Error(), "/bin/ls: interpreter /lib64/ld-linux-x86-64.so.2: missing") {
		t.Errorf("loader missing: %v", err)
	}
}

func TestResolveIn(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "usr/lib/aarch64-linux-gnu"), 0o755)
	os.WriteFile(filepath.Join(root, "usr/lib/aarch64-linux-gnu/libz.so.1.2.13"), nil, 0o644)
	os.Symlink("usr/lib", filepath.Join(root, "lib"))                                        // relative, a directory
	os.Symlink("libz.so.1.2.13", filepath.Join(root, "usr/lib/aarch64-linux-gnu/libz.so.1")) // relative, a file
	os.Symlink("/../../../etc", filepath.Join(root, "etc"))                                  // never above the root
	os.Symlink("loop", filepath.Join(root, "loop"))
	for p, want := range map[string]string{
		"/lib/aarch64-linux-gnu/libz.so.1":                             "usr/lib/aarch64-linux-gnu/libz.so.1.2.13",
		"/lib/../lib/aarch64-linux-gnu/../aarch64-linux-gnu/libz.so.1": "usr/lib/aarch64-linux-gnu/libz.so.1.2.13",
		"/etc/passwd": "",
		"/loop":       "",
	} {
		got, err := resolveIn(root, p)
		if want == "" {
			if err == nil {
				t.Errorf("%s resolved to %s", p, got)
			}
			continue
		}
		if err != nil || got != filepath.Join(root, want) {
			t.Errorf("%s: %s, %v; want %s", p, got, err, want)
		}
	}
}
