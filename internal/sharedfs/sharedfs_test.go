package sharedfs

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/hostos/mount"
)

// The fixtures in testdata are a GlusterFS 10.3 FUSE client's .meta files,
// read on the test harness's volume (internal/testutil/gluster):
// volfile-shared with SharedPoolSettings (strict-locks on, stat-prefetch
// and quick-read off), volfile-default after `gluster volume reset` of the
// three; fuse-private-coherent from a client mounted with
// --entry-timeout=0 --attribute-timeout=0, fuse-private-default from one
// without.
func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// meta builds a client's .meta: the volfile, strict-locks per client
// translator (absent from strict when the options file is to be missing)
// and the FUSE translator's private dump (none when empty).
func meta(volfile, private []byte, strict map[string]string) fstest.MapFS {
	m := fstest.MapFS{metaVolfile: {Data: volfile}, metaOptions + "/mountpoint": {Data: []byte("/mnt/shared")}}
	for client, v := range strict {
		m[metaGraph+"/"+client+"/options/strict-locks"] = &fstest.MapFile{Data: []byte(v)}
	}
	if private != nil {
		m[metaPrivate] = &fstest.MapFile{Data: private}
	}
	return m
}

func settingsOf(us []*Unmet) []string {
	var out []string
	for _, u := range us {
		out = append(out, u.Setting)
	}
	return out
}

func TestParseVolfile(t *testing.T) {
	g, err := parseVolfile(fixture(t, "volfile-default"))
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]string{}
	for _, x := range g {
		types[x.name] = x.typ
	}
	for name, typ := range map[string]string{"fvgl-client-0": "protocol/client", "fvgl-md-cache": "performance/md-cache",
		"fvgl-quick-read": "performance/quick-read", "meta-autoload": "meta"} {
		if types[name] != typ {
			t.Errorf("%s: type %q, want %q (all: %v)", name, types[name], typ, types)
		}
	}
	if g[0].options["strict-locks"] != "off" || g[0].options["remote-host"] != "10.213.0.1" {
		t.Errorf("client options: %v", g[0].options)
	}
	for _, bad := range []string{"type protocol/client\n", "volume a\nvolume b\n", "volume a\ntype x\n", "end-volume\n",
		"volume a\noption\nend-volume\n", "subvolumes a\n", "volume a b\nend-volume\n"} {
		if _, err := parseVolfile([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	g, err = parseVolfile([]byte("# comment\nvolume a # the first\n  type t/x\n  option k v w\n  subvolumes b c\nend-volume\n\n"))
	if err != nil || len(g) != 1 || g[0].typ != "t/x" || g[0].options["k"] != "v w" {
		t.Errorf("comments and blank lines: %+v, %v", g, err)
	}
}

// As documented: strict-locks on, no md-cache or quick-read translator,
// timeouts 0: nothing unmet, and every setting found with its value.
func TestGlusterFSAsDocumented(t *testing.T) {
	r := Report{Volume: "fvgl", Source: "10.213.0.1:fvgl"}
	us := glusterSettings(&r, meta(fixture(t, "volfile-shared"), fixture(t, "fuse-private-coherent"), map[string]string{"fvgl-client-0": "on\n"}), nil, "/mnt/shared")
	if len(us) != 0 {
		t.Fatalf("unmet: %v", joinUnmet(us))
	}
	want := []Found{{SettingStrictLocks, "on", "on", true}, {SettingStatPrefetch, "off", "off", true}, {SettingQuickRead, "off", "off", true},
		{SettingEntryTimeout, "0", "0", true}, {SettingAttributeTimeout, "0", "0", true}}
	if !slices.Equal(r.Found, want) {
		t.Errorf("found %+v, want %+v", r.Found, want)
	}
}

// GlusterFS's defaults: every requirement unmet, each error naming the
// setting, what was found where, and the exact fix.
func TestGlusterFSDefaults(t *testing.T) {
	r := Report{Volume: "fvgl", Source: "10.213.0.1:fvgl"}
	us := glusterSettings(&r, meta(fixture(t, "volfile-default"), fixture(t, "fuse-private-default"), map[string]string{"fvgl-client-0": "off"}), nil, "/mnt/shared")
	if got := settingsOf(us); !slices.Equal(got, GlusterFSSettings()) {
		t.Fatalf("unmet %v, want %v", got, GlusterFSSettings())
	}
	wants := []string{
		"strict-locks: off in fvgl-client-0 (/mnt/shared/.meta/graphs/active/fvgl-client-0/options/strict-locks), want on (", "fix: gluster volume set fvgl client.strict-locks on, then remount the volume on every node",
		"stat-prefetch: on (translator fvgl-md-cache, type performance/md-cache, in /mnt/shared/.meta/graphs/active/volfile), want off", "fix: gluster volume set fvgl performance.stat-prefetch off;",
		"quick-read: on (translator fvgl-quick-read", "fix: gluster volume set fvgl performance.quick-read off;",
		"entry-timeout: 1 s (/mnt/shared/.meta/root/private), want 0", "attribute-timeout: 1 s (/mnt/shared/.meta/root/private), want 0",
		"mount -t glusterfs -o entry-timeout=0,attribute-timeout=0 10.213.0.1:fvgl /mnt/shared",
		"--shared-pool-unsafe-allow=strict-locks", "--shared-pool-unsafe-allow=attribute-timeout",
	}
	msg := joinUnmet(us).Error()
	for _, w := range wants {
		if !strings.Contains(msg, w) {
			t.Errorf("the error lacks %q:\n%s", w, msg)
		}
	}
	if strings.Count(msg, "\n") != 4 {
		t.Errorf("want one line per setting:\n%s", msg)
	}
	for _, f := range r.Found {
		if f.OK {
			t.Errorf("%+v found OK", f)
		}
	}
}

// strict-locks is read per client translator (one per brick): one off is
// unmet, and names it. Without the options file the volfile's option
// counts, and without either, GlusterFS's default (off).
func TestStrictLocksEveryClient(t *testing.T) {
	two := []byte("volume v-client-0\n type protocol/client\n option strict-locks on\nend-volume\n" +
		"volume v-client-1\n type protocol/client\nend-volume\n" +
		"volume v-client-2\n type protocol/client\n option strict-locks yes\nend-volume\n")
	for _, tc := range []struct {
		name   string
		strict map[string]string
		ok     bool
		found  string
	}{
		{"all on", map[string]string{"v-client-0": "on", "v-client-1": "on", "v-client-2": "on"}, true, "on in v-client-0, v-client-1, v-client-2"},
		{"one off", map[string]string{"v-client-0": "on", "v-client-1": "off", "v-client-2": "on"}, false, "off in v-client-1 (/m/.meta/graphs/active/v-client-1/options/strict-locks)"},
		{"options files missing", nil, false, "off (not set) in v-client-1 (/m/.meta/graphs/active/volfile)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			found, ok, err := strictLocks(meta(two, nil, tc.strict), "/m")
			if err != nil || ok != tc.ok || !strings.HasPrefix(found, tc.found) {
				t.Errorf("got %q, %v, %v; want %q..., %v", found, ok, err, tc.found, tc.ok)
			}
			if !tc.ok && (strings.Contains(found, "v-client-0") || strings.Contains(found, "v-client-2")) {
				t.Errorf("%q names a client that has it on", found)
			}
		})
	}
	if _, _, err := strictLocks(meta([]byte("volume x\n type meta\nend-volume\n"), nil, nil), "/m"); err == nil {
		t.Error("a graph without a client translator passed")
	}
}

// The timeouts: the FUSE translator's effective values first; without its
// dump the mount's options, and an option the mount did not set is
// GlusterFS's default of 1 s.
func TestFuseTimeoutSources(t *testing.T) {
	vf := fixture(t, "volfile-shared")
	m := meta(vf, nil, nil)
	m[metaOptions+"/entry-timeout"] = &fstest.MapFile{Data: []byte("0.000000")}
	if found, ok, err := fuseTimeout(m, "/m", "entry"); err != nil || !ok || found != "0 s (/m/.meta/root/options/entry-timeout)" {
		t.Errorf("from the option: %q %v %v", found, ok, err)
	}
	if found, ok, err := fuseTimeout(m, "/m", "attribute"); err != nil || ok || !strings.Contains(found, "1 s (not set at mount") {
		t.Errorf("unset: %q %v %v", found, ok, err)
	}
	m[metaPrivate] = &fstest.MapFile{Data: []byte("[xlator.mount.fuse.priv]\nattribute_timeout = 2.500000\n")}
	if found, ok, err := fuseTimeout(m, "/m", "attribute"); err != nil || ok || found != "2.5 s (/m/.meta/root/private)" {
		t.Errorf("from the dump: %q %v %v", found, ok, err)
	}
	m[metaPrivate] = &fstest.MapFile{Data: []byte("attribute_timeout = soon\n")}
	if _, _, err := fuseTimeout(m, "/m", "attribute"); err == nil {
		t.Error("a value that is no number passed")
	}
	if _, _, err := fuseTimeout(fstest.MapFS{metaVolfile: {Data: vf}}, "/m", "entry"); err == nil {
		t.Error("no dump and no options passed")
	}
}

// A client whose .meta cannot be reached: every setting is unmet, as not
// read, with the reason.
func TestGlusterFSUnreadable(t *testing.T) {
	for _, tc := range []struct {
		name string
		fsys fstest.MapFS
		why  error
	}{
		{"subdirectory mount", nil, errors.New("/p mounts the volume's subdirectory /pool")},
		{"no .meta", fstest.MapFS{"pool/x": {}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Report{Volume: "v"}
			var us []*Unmet
			if tc.fsys == nil {
				us = glusterSettings(&r, nil, tc.why, "/p")
			} else {
				us = glusterSettings(&r, tc.fsys, nil, "/p")
			}
			if got := settingsOf(us); !slices.Equal(got, GlusterFSSettings()) {
				t.Fatalf("unmet %v", got)
			}
			for _, u := range us {
				if !strings.HasPrefix(u.Found, "could not be read: ") || (tc.why != nil && !strings.Contains(u.Found, "subdirectory /pool")) {
					t.Errorf("%s: found %q", u.Setting, u.Found)
				}
			}
		})
	}
}

func TestProfileOf(t *testing.T) {
	for _, tc := range []struct {
		fstype string
		magic  int64
		want   Kind
	}{
		{"fuse.glusterfs", unix.FUSE_SUPER_MAGIC, KindGlusterFS},
		{"ext4", unix.EXT4_SUPER_MAGIC, KindLocal},
		{"btrfs", unix.BTRFS_SUPER_MAGIC, KindLocal},
		{"tmpfs", unix.TMPFS_MAGIC, KindLocal},
		{"nfs4", unix.NFS_SUPER_MAGIC, KindOther},
		{"ceph", 0x00c36400, KindOther},
		{"fuse.sshfs", unix.FUSE_SUPER_MAGIC, KindOther},
		{"fuse.ceph-fuse", unix.FUSE_SUPER_MAGIC, KindCephFS},
		{"", unix.XFS_SUPER_MAGIC, KindLocal},
		{"", unix.FUSE_SUPER_MAGIC, KindOther}, // a FUSE mount not in the table: not taken for GlusterFS's
	} {
		if got := profileOf(tc.fstype, tc.magic).kind; got != tc.want {
			t.Errorf("%q %#x: %s, want %s", tc.fstype, tc.magic, got, tc.want)
		}
	}
	// Only GlusterFS's and CephFS's profiles need anything.
	if len(localProfile.needs) != 0 || len(otherProfile.needs) != 0 || !slices.Equal(glusterProfile.needs, GlusterFSSettings()) ||
		!slices.Equal(cephProfile.needs, CephSettings()) || !slices.Equal(Settings(), append(GlusterFSSettings(), CephSettings()...)) {
		t.Error("profiles' needs changed")
	}
}

const table = `20 1 252:1 / / rw - ext4 /dev/vda rw
30 20 0:42 / /mnt/shared rw,relatime - fuse.glusterfs 10.0.0.1:fvgl rw,user_id=0
31 20 0:42 /pool /var/lib/pool rw,relatime - fuse.glusterfs 10.0.0.1:fvgl rw,user_id=0
32 20 0:50 /sub /only-sub rw - fuse.glusterfs 10.0.0.1:other rw
33 20 0:51 / /mnt/nfs rw - nfs4 srv:/export rw
34 33 0:51 / /mnt/nfs rw - nfs4 srv:/export2 rw
`

func TestMountOf(t *testing.T) {
	tb, err := mount.Parse([]byte(table))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path         string
		id           uint64
		idOK         bool
		major, minor uint32
		want         int
	}{
		{"/var/lib/pool/x", 31, true, 0, 42, 31},
		{"/var/lib/pool/x", 0, false, 0, 42, 31},
		{"/mnt/shared/pool", 0, false, 0, 42, 30},
		{"/mnt/nfs/a", 0, false, 0, 51, 34}, // the upper of two on one mount point
		{"/home/x", 0, false, 252, 1, 20},
		{"/mnt/sharedx", 0, false, 0, 42, -1},
	} {
		m, ok := mountOf(tb, tc.path, tc.id, tc.idOK, tc.major, tc.minor)
		if got := map[bool]int{true: m.ID, false: -1}[ok]; got != tc.want {
			t.Errorf("%s (id %d %v, %d:%d): mount %d, want %d", tc.path, tc.id, tc.idOK, tc.major, tc.minor, got, tc.want)
		}
	}
	// A bind of a subdirectory reads .meta where the same client mounts
	// the volume's root; with none, it says why.
	m, _ := mountOf(tb, "/var/lib/pool", 31, true, 0, 0)
	if root, err := volumeRoot(tb, m); err != nil || root != "/mnt/shared" {
		t.Errorf("volume root of mount 31: %q, %v", root, err)
	}
	m, _ = mountOf(tb, "/only-sub", 32, true, 0, 0)
	if _, err := volumeRoot(tb, m); err == nil || !strings.Contains(err.Error(), "subdirectory /sub") {
		t.Errorf("volume root of mount 32: %v", err)
	}
}

func TestVolumeOf(t *testing.T) {
	for src, want := range map[string]string{"10.0.0.1:fvgl": "fvgl", "srv:/vol": "vol", "[::1]:v": "v", "none": ""} {
		if got := volumeOf(src); got != want {
			t.Errorf("%q: %q, want %q", src, got, want)
		}
	}
}

func TestAllow(t *testing.T) {
	err := joinUnmet([]*Unmet{{Setting: SettingStrictLocks}, {Setting: SettingEntryTimeout}, {Setting: SettingAttributeTimeout}})
	allowed, rest := Allow(err, []string{SettingEntryTimeout, SettingAttributeTimeout, SettingQuickRead})
	if got := settingsOf(allowed); !slices.Equal(got, []string{SettingEntryTimeout, SettingAttributeTimeout}) {
		t.Errorf("allowed %v", got)
	}
	if got := settingsOf(Unmets(rest)); !slices.Equal(got, []string{SettingStrictLocks}) {
		t.Errorf("refused %v", got)
	}
	if allowed, rest := Allow(err, Settings()); len(allowed) != 3 || rest != nil {
		t.Errorf("all allowed: %v, %v", allowed, rest)
	}
	other := errors.New("statfs: no such file")
	if allowed, rest := Allow(other, Settings()); allowed != nil || rest != other {
		t.Errorf("an error naming no setting: %v, %v", allowed, rest)
	}
	if allowed, rest := Allow(nil, nil); allowed != nil || rest != nil {
		t.Errorf("nil: %v, %v", allowed, rest)
	}
}

func TestWarnOther(t *testing.T) {
	r := Report{Dir: "/mnt/nfs/pool", FSType: "nfs4", Source: "srv:/export", MountPoint: "/mnt/nfs"}
	tb, _ := mount.Parse([]byte(table))
	m, _ := mountOf(tb, "/mnt/nfs/pool", 34, true, 0, 0)
	if us := check(&r, tb, m, true, env{}); us != nil || r.Kind != KindOther || len(r.Warnings) != 1 ||
		!strings.Contains(r.Warnings[0], "nfs4 srv:/export at /mnt/nfs, a filesystem filevol does not know") || !strings.Contains(r.Warnings[0], "nothing is guaranteed") {
		t.Errorf("%v %+v", us, r)
	}
}

// Check on this machine's directories: no root needed. A directory that
// does not exist yet is told by its nearest existing ancestor.
func TestCheckLocal(t *testing.T) {
	dir := t.TempDir()
	r, err := Check(filepath.Join(dir, "not", "yet"))
	if err != nil {
		t.Fatal(err)
	}
	if real, _ := filepath.EvalSymlinks(dir); r.Path != real {
		t.Errorf("path %q, want %q", r.Path, real)
	}
	if r.MountPoint == "" || r.FSType == "" || r.Magic == 0 {
		t.Errorf("mount not found: %+v", r)
	}
	switch r.Kind {
	case KindLocal:
		if len(r.Warnings) != 0 || len(r.Found) != 0 {
			t.Errorf("local: %+v", r)
		}
	case KindOther: // a test machine's odd temporary directory
		if len(r.Warnings) != 1 {
			t.Errorf("other: %+v", r)
		}
	default:
		t.Errorf("kind %s for %s", r.Kind, dir)
	}
	t.Log(r)
	r, err = Check("/proc/self")
	if err != nil || r.Kind != KindOther || len(r.Warnings) != 1 {
		t.Errorf("/proc: %+v, %v", r, err)
	}
}
