package ceph_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/filevol/filevol/internal/sharedfs"
)

// TestSharedPoolFilesystemChecked: internal/sharedfs tells a ceph-fuse
// mount, finds its client's admin socket (by the mount's ceph.client_id
// and ceph.cluster_fsid) and reads fuse_disable_pagecache as the client
// runs it: node-a, mounted as documented, passes; node-c, mounted with the
// page cache on, is refused naming the setting and its fix, unless
// --shared-pool-unsafe-allow names it.
func TestSharedPoolFilesystemChecked(t *testing.T) {
	c, a, _ := twoNodes(t)
	o := sharedfs.Options{CephSocketDirs: []string{c.RunDir()}}
	start := time.Now()
	r, err := sharedfs.CheckWith(filepath.Join(a, "pool"), o)
	took := time.Since(start)
	if err != nil || r.Kind != sharedfs.KindCephFS || r.FSType != "fuse.ceph-fuse" {
		t.Fatalf("node-a as documented: %s: %v", r, err)
	}
	if want := []sharedfs.Found{{Setting: sharedfs.SettingFuseDisablePagecache, Value: "true", Want: "true", OK: true}}; !slices.Equal(r.Found, want) {
		t.Errorf("node-a: found %+v, want %+v", r.Found, want)
	}
	t.Logf("node-a, as documented: %s (checked in %v)", r, took.Round(time.Microsecond))

	cc := filepath.Join(c.MountNode(t, "node-c", "--fuse_disable_pagecache=false"), filepath.Base(a))
	r, err = sharedfs.CheckWith(cc, o)
	us := sharedfs.Unmets(err)
	if r.Kind != sharedfs.KindCephFS || len(us) != 1 || us[0].Setting != sharedfs.SettingFuseDisablePagecache {
		t.Fatalf("node-c, page cache on: %s: %v", r, err)
	}
	msg := err.Error()
	t.Logf("node-c, page cache on: refused: %s", msg)
	for _, want := range []string{"fuse-disable-pagecache: false (client.", "admin socket " + c.RunDir() + "/" + c.ClientUser(t, "node-c") + ".asok), want true",
		"fix: set `fuse disable pagecache = true` in the [client] section of ceph.conf", "--shared-pool-unsafe-allow=fuse-disable-pagecache"} {
		if !strings.Contains(msg, want) {
			t.Errorf("node-c's refusal lacks %q", want)
		}
	}
	if allowed, rest := sharedfs.Allow(err, []string{sharedfs.SettingFuseDisablePagecache}); len(allowed) != 1 || rest != nil {
		t.Errorf("allowed: %v, %v", allowed, rest)
	}
}
