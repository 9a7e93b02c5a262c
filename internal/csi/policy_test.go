package csi

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
)

func TestCheckMountFlags(t *testing.T) {
	cases := []struct {
		flags []string
		ok    bool
	}{
		{nil, true},
		{[]string{"noatime", "discard", "nosuid", "nodev", "noexec"}, true},
		{[]string{"data=ordered"}, true},
		{[]string{"suid"}, false},
		{[]string{"dev"}, false},
		{[]string{"defaults"}, false},
		{[]string{"bind"}, false},
		{[]string{"remount"}, false},
		{[]string{"noatime,suid"}, false},
		{[]string{""}, false},
		{[]string{"a\x00b"}, false},
		{[]string{strings.Repeat("x", 5000)}, false},
	}
	for _, c := range cases {
		err := checkMountFlags(c.flags)
		if (err == nil) != c.ok {
			t.Errorf("checkMountFlags(%q) = %v, want ok=%v", c.flags, err, c.ok)
		}
		if err != nil && codeOf(err) != codes.InvalidArgument {
			t.Errorf("checkMountFlags(%q): code %v, want INVALID_ARGUMENT", c.flags, codeOf(err))
		}
	}
}

func TestPathPolicy(t *testing.T) {
	root := t.TempDir()
	kubelet := filepath.Join(root, "kubelet")
	outside := filepath.Join(root, "etc")
	for _, d := range []string{filepath.Join(kubelet, "pods"), outside} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	// A symlink inside the kubelet dir that points outside it.
	if err := os.Symlink(outside, filepath.Join(kubelet, "pods", "escape")); err != nil {
		t.Fatal(err)
	}
	pp := pathPolicy{kubeletDir: kubelet}
	cases := []struct {
		path string
		ok   bool
	}{
		{filepath.Join(kubelet, "pods", "uid", "volumes", "mount"), true},
		{filepath.Join(kubelet, "pods") + "/", true},
		{kubelet, true},
		{kubelet + "-other/x", false},
		{outside, false},
		{"/etc", false},
		{filepath.Join(kubelet, "pods", "..", "..", "etc"), false},
		{filepath.Join(kubelet, "pods", "escape"), false},
		{filepath.Join(kubelet, "pods", "escape", "not-yet"), false},
		{"relative", false},
	}
	for _, c := range cases {
		got, err := pp.check("target path", c.path)
		if (err == nil) != c.ok {
			t.Errorf("check(%q) = %q, %v; want ok=%v", c.path, got, err, c.ok)
		}
		if err != nil && codeOf(err) != codes.InvalidArgument {
			t.Errorf("check(%q): code %v", c.path, codeOf(err))
		}
	}
	if _, err := (pathPolicy{}).check("target path", "/anywhere/at/all"); err != nil {
		t.Errorf("empty kubelet dir must not confine: %v", err)
	}
}
