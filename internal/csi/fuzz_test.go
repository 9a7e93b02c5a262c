package csi

import (
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/filevol/filevol/internal/volview"
	"google.golang.org/grpc/codes"
)

// The fuzz targets below hold the validators to their contract on any
// input: no panic, the error is a proper gRPC code, and what they accept is
// safe to use as a path, a size or a mount option.

func FuzzCheckPath(f *testing.F) {
	for _, s := range []string{"/var/lib/kubelet/pods/a/mount", "", "rel", "/a/../b", "/a\x00", "/./a//b/"} {
		f.Add(s)
	}
	pp := pathPolicy{kubeletDir: "/var/lib/kubelet"}
	f.Fuzz(func(t *testing.T, p string) {
		clean, err := pp.check("target path", p)
		if err != nil {
			if c := codeOf(err); c != codes.InvalidArgument {
				t.Fatalf("code %v for %q", c, p)
			}
			return
		}
		if !volview.Within(clean, "/var/lib/kubelet") || strings.Contains(clean, "\x00") {
			t.Fatalf("accepted %q as %q", p, clean)
		}
		for _, part := range strings.Split(clean, "/") {
			if part == ".." {
				t.Fatalf("accepted %q with ..", p)
			}
		}
	})
}

func FuzzVolumeSize(f *testing.F) {
	f.Add(int64(0), int64(0), int64(1<<20))
	f.Add(int64(1<<30), int64(2<<30), int64(300<<20))
	f.Add(int64(-1), int64(9223372036854775807), int64(1))
	f.Add(int64(9223372036854775807), int64(0), int64(128<<20))
	f.Fuzz(func(t *testing.T, req, lim, minimum int64) {
		if minimum < 0 || minimum > 1<<40 {
			return // minimums come from fs.MinSize, never from requests
		}
		size, err := volumeSize(&csipb.CapacityRange{RequiredBytes: req, LimitBytes: lim}, minimum)
		if err != nil {
			if c := codeOf(err); c != codes.InvalidArgument && c != codes.OutOfRange {
				t.Fatalf("code %v", c)
			}
			return
		}
		switch {
		case size <= 0, size%allocationUnit != 0:
			t.Fatalf("size %d for [%d,%d]", size, req, lim)
		case size < req, size < minimum:
			t.Fatalf("size %d below required %d / minimum %d", size, req, minimum)
		case lim > 0 && size > lim:
			t.Fatalf("size %d above limit %d", size, lim)
		}
	})
}

func FuzzParseParameters(f *testing.F) {
	f.Add(ParamFSType, "xfs", ParamProvisioning, "thick")
	f.Add("unknown", "x", "csi.storage.k8s.io/pvc/name", "data")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		p, err := parseParameters(map[string]string{k1: v1, k2: v2})
		if err != nil {
			if codeOf(err) != codes.InvalidArgument {
				t.Fatalf("code %v", codeOf(err))
			}
			return
		}
		if p.fsType != "" && !supportedFS(p.fsType) || p.provisioning != "thin" && p.provisioning != "thick" {
			t.Fatalf("accepted %+v", p)
		}
	})
}

func FuzzCheckMountFlags(f *testing.F) {
	f.Add("noatime", "discard")
	f.Add("suid", "")
	f.Add("a,b", "x\x00")
	f.Fuzz(func(t *testing.T, a, b string) {
		err := checkMountFlags([]string{a, b})
		if err != nil {
			if codeOf(err) != codes.InvalidArgument {
				t.Fatalf("code %v", codeOf(err))
			}
			return
		}
		for _, o := range []string{a, b} {
			if _, refused := refusedMountOptions[o]; refused || strings.ContainsAny(o, ",\x00") || o == "" {
				t.Fatalf("accepted %q", o)
			}
		}
	})
}
