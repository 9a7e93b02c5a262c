package csi

import (
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/filevol/filevol/internal/pool"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func codeOf(err error) codes.Code { return status.Code(toStatus(err)) }

func TestVolumeSize(t *testing.T) {
	const mi, gi = int64(1 << 20), int64(1 << 30)
	cases := []struct {
		name     string
		req, lim int64
		min      int64
		want     int64
		code     codes.Code
	}{
		{"no range gives the default", 0, 0, mi, gi, codes.OK},
		{"exact MiB kept", 5 * mi, 0, mi, 5 * mi, codes.OK},
		{"rounded up to MiB", 5*mi + 1, 0, mi, 6 * mi, codes.OK},
		{"raised to fs minimum", mi, 0, 300 * mi, 300 * mi, codes.OK},
		{"default capped by limit", 0, 100 * mi, mi, 100 * mi, codes.OK},
		{"limit not a MiB multiple", 0, 100*mi + 5, mi, 100 * mi, codes.OK},
		{"limit equal to required", 10 * mi, 10 * mi, mi, 10 * mi, codes.OK},
		{"limit below one unit, no required", 0, 93, 0, 0, codes.OutOfRange},
		{"rounding would pass limit", 10*mi + 1, 10*mi + 2, mi, 0, codes.OutOfRange},
		{"minimum above limit", mi, 100 * mi, 300 * mi, 0, codes.OutOfRange},
		{"required above limit", 2 * gi, gi, mi, 0, codes.OutOfRange},
		{"negative required", -1, 0, mi, 0, codes.InvalidArgument},
		{"negative limit", 0, -1, mi, 0, codes.InvalidArgument},
		{"overflowing required", 1 << 62, 0, mi, 0, codes.OutOfRange},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := volumeSize(&csipb.CapacityRange{RequiredBytes: c.req, LimitBytes: c.lim}, c.min)
			if code := codeOf(err); code != c.code {
				t.Fatalf("code %v (%v), want %v", code, err, c.code)
			}
			if err == nil && got != c.want {
				t.Fatalf("size %d, want %d", got, c.want)
			}
		})
	}
}

func TestParseParameters(t *testing.T) {
	cases := []struct {
		params  map[string]string
		fs      string
		prov    string
		errWord string // a word the error message must contain
	}{
		{nil, "", "thin", ""},
		{map[string]string{ParamFSType: "XFS"}, "xfs", "thin", ""},
		{map[string]string{ParamProvisioning: "thick"}, "", "thick", ""},
		{map[string]string{"csi.storage.k8s.io/pvc/name": "data"}, "", "thin", ""},
		{map[string]string{ParamFSType: "ntfs"}, "", "", "ntfs"},
		{map[string]string{ParamProvisioning: "fat"}, "", "", "fat"},
		{map[string]string{"replicas": "3"}, "", "", "replicas"},
	}
	for _, c := range cases {
		p, err := parseParameters(c.params)
		if c.errWord != "" {
			if codeOf(err) != codes.InvalidArgument || !strings.Contains(err.Error(), c.errWord) {
				t.Errorf("%v: got %v, want INVALID_ARGUMENT naming %q", c.params, err, c.errWord)
			}
			continue
		}
		if err != nil || p.fsType != c.fs || p.provisioning != c.prov {
			t.Errorf("%v: got %+v, %v", c.params, p, err)
		}
	}
}

func mountCap(mode csipb.VolumeCapability_AccessMode_Mode, fs string, flags ...string) *csipb.VolumeCapability {
	return &csipb.VolumeCapability{
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: mode},
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{FsType: fs, MountFlags: flags}},
	}
}

func TestCheckCapabilities(t *testing.T) {
	snw := csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	block := &csipb.VolumeCapability{
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: snw},
		AccessType: &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}},
	}
	cases := []struct {
		name  string
		caps  []*csipb.VolumeCapability
		param string
		fs    string
		block bool
		code  codes.Code
	}{
		{"default ext4", []*csipb.VolumeCapability{mountCap(snw, "")}, "", "ext4", false, codes.OK},
		{"xfs from capability", []*csipb.VolumeCapability{mountCap(snw, "xfs")}, "", "xfs", false, codes.OK},
		{"btrfs from parameter", []*csipb.VolumeCapability{mountCap(snw, "")}, "btrfs", "btrfs", false, codes.OK},
		{"block only", []*csipb.VolumeCapability{block}, "", "ext4", true, codes.OK},
		{"conflicting fs", []*csipb.VolumeCapability{mountCap(snw, "xfs")}, "ext4", "", false, codes.InvalidArgument},
		{"multi-node refused", []*csipb.VolumeCapability{mountCap(csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER, "")}, "", "", false, codes.InvalidArgument},
		{"no access mode", []*csipb.VolumeCapability{{AccessType: block.AccessType}}, "", "", false, codes.InvalidArgument},
		{"no access type", []*csipb.VolumeCapability{{AccessMode: block.AccessMode}}, "", "", false, codes.InvalidArgument},
		{"none", nil, "", "", false, codes.InvalidArgument},
		{"mount flag with comma", []*csipb.VolumeCapability{mountCap(snw, "", "ro,nosuid")}, "", "", false, codes.InvalidArgument},
		{"unknown fs", []*csipb.VolumeCapability{mountCap(snw, "zfs")}, "", "", false, codes.InvalidArgument},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := createParams{fsType: c.param}
			err := checkCapabilities(c.caps, &p, pool.Traits, false)
			if code := codeOf(err); code != c.code {
				t.Fatalf("code %v (%v), want %v", code, err, c.code)
			}
			if err == nil && (p.fsType != c.fs || p.block != c.block) {
				t.Fatalf("got fs %q block %v, want %q %v", p.fsType, p.block, c.fs, c.block)
			}
		})
	}
}

func TestCheckPathAndNames(t *testing.T) {
	bad := []string{"", "relative/path", "/a/../etc", "/a/\x00b", "/" + strings.Repeat("a", maxPathLen)}
	for _, p := range bad {
		if codeOf(checkPath("target path", p)) != codes.InvalidArgument {
			t.Errorf("checkPath(%q) accepted", truncate(p))
		}
	}
	for _, p := range []string{"/var/lib/kubelet/pods/x/volumes/kubernetes.io~csi/pvc-1/mount", "/a/b/"} {
		if err := checkPath("target path", p); err != nil {
			t.Errorf("checkPath(%q): %v", p, err)
		}
	}
	if codeOf(checkName("volume", "")) != codes.InvalidArgument ||
		codeOf(checkName("volume", strings.Repeat("n", maxNameLen+1))) != codes.InvalidArgument ||
		codeOf(checkName("volume", "a\x00b")) != codes.InvalidArgument {
		t.Error("checkName accepted a bad name")
	}
	if err := checkName("volume", "pvc-"+strings.Repeat("x", 124)); err != nil {
		t.Errorf("128-byte name refused: %v", err)
	}
	for id, code := range map[string]codes.Code{
		"": codes.InvalidArgument, "../../etc/passwd": codes.NotFound, "fv-zz": codes.NotFound,
		"fv-0123456789abcdef0123456789abcdef": codes.OK,
	} {
		if got := codeOf(checkVolumeID(id)); got != code {
			t.Errorf("checkVolumeID(%q) = %v, want %v", id, got, code)
		}
	}
}
