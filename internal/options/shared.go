package options

import (
	"flag"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// addSharedFlags registers the options of a shared pool's filesystem.
func (o *Options) addSharedFlags(fs *flag.FlagSet) {
	fs.Var((*pathList)(&o.SharedPoolUnsafeAllow), "shared-pool-unsafe-allow", "with --pool-shared: comma-separated settings the shared filesystem may lack, each a risk accepted ("+strings.Join(UnsafeSharedSettings, ", ")+"; default: none, a shared pool lacking one is refused at start)")
	fs.Var((*pathList)(&o.SharedPoolRequire), "shared-pool-require", "with --pool-shared: comma-separated guarantees the shared filesystem's client must show, else the pool is refused at start ("+strings.Join(SharedRequirements, ", ")+": the GlusterFS client's I/O path in TLS; default: none)")
	fs.Var((*pathList)(&o.DirPoolRequire), "dir-pool-require", "with --pool-shared and --dir-pool-dir: comma-separated guarantees the directory pool's filesystem must show, as --shared-pool-require's, or none (default: --shared-pool-require's)")
	fs.Var((*pathList)(&o.CephAdminSocketDirs), "ceph-admin-socket-dir", "with --pool-shared on a ceph-fuse mount: comma-separated directories holding the client's admin socket, where fuse_disable_pagecache is read (default: /run/ceph,/var/run/ceph)")
	fs.StringVar(&o.SharedPoolTLSSecretDir, "shared-pool-tls-secret-dir", "", "with --pool-shared and --shared-pool-tls-dir: a mounted Secret (tls.crt, tls.key, ca.crt) whose files are installed, and kept current, in --shared-pool-tls-dir for the shared filesystem's client (default: none)")
	fs.StringVar(&o.SharedPoolTLSDir, "shared-pool-tls-dir", "", "with --shared-pool-tls-secret-dir: the host directory the shared filesystem's client reads its TLS files from (glusterfs.pem, glusterfs.key, glusterfs.ca; the volume's ssl.own-cert, ssl.private-key, ssl.ca-list)")
	fs.DurationVar(&o.SharedPoolWait, "shared-pool-wait", 0, "with --pool-shared: how long the start waits for the shared pool's filesystem to pass its checks, for a mount made after filevol starts (default 0: refused at once)")
}

// validateShared checks the options of a shared pool's filesystem.
func (o *Options) validateShared() error {
	for _, a := range o.SharedPoolUnsafeAllow {
		if !slices.Contains(UnsafeSharedSettings, a) {
			return fmt.Errorf("--shared-pool-unsafe-allow: %q is none of %s", a, strings.Join(UnsafeSharedSettings, ", "))
		}
	}
	for _, r := range o.SharedPoolRequire {
		if !slices.Contains(SharedRequirements, r) {
			return fmt.Errorf("--shared-pool-require: %q is none of %s", r, strings.Join(SharedRequirements, ", "))
		}
	}
	for _, r := range o.DirPoolRequire {
		if r != "none" && !slices.Contains(SharedRequirements, r) || r == "none" && len(o.DirPoolRequire) > 1 {
			return fmt.Errorf("--dir-pool-require: %q: want none alone, or some of %s", strings.Join(o.DirPoolRequire, ","), strings.Join(SharedRequirements, ", "))
		}
	}
	if len(o.DirPoolRequire) > 0 && o.DirPoolDir == "" {
		return fmt.Errorf("--dir-pool-require is about the directory pool's filesystem: it needs --dir-pool-dir")
	}
	if (o.SharedPoolTLSSecretDir == "") != (o.SharedPoolTLSDir == "") {
		return fmt.Errorf("--shared-pool-tls-secret-dir and --shared-pool-tls-dir go together: the files of the one are installed in the other")
	}
	for _, d := range [][2]string{{"--shared-pool-tls-secret-dir", o.SharedPoolTLSSecretDir}, {"--shared-pool-tls-dir", o.SharedPoolTLSDir}} {
		if d[1] != "" && (!filepath.IsAbs(d[1]) || filepath.Clean(d[1]) == "/") {
			return fmt.Errorf("%s %q must be an absolute path other than /", d[0], d[1])
		}
	}
	if o.SharedPoolWait < 0 || o.SharedPoolWait > time.Hour {
		return fmt.Errorf("--shared-pool-wait %s must be from 0 to 1h", o.SharedPoolWait)
	}
	if o.PoolShared {
		return nil
	}
	for _, f := range []struct {
		set  bool
		flag string
		why  string
	}{
		{len(o.SharedPoolRequire) > 0, "--shared-pool-require", "is about a shared pool's filesystem"},
		{len(o.DirPoolRequire) > 0, "--dir-pool-require", "is about a shared directory pool's filesystem"},
		{len(o.SharedPoolUnsafeAllow) > 0, "--shared-pool-unsafe-allow", "accepts risks of a shared pool"},
		{len(o.CephAdminSocketDirs) > 0, "--ceph-admin-socket-dir", "tells the check of a shared pool on CephFS where to look"},
		{o.SharedPoolTLSSecretDir != "", "--shared-pool-tls-secret-dir", "installs a shared filesystem client's files"},
		{o.SharedPoolWait != 0, "--shared-pool-wait", "waits for a shared pool's filesystem"},
	} {
		if f.set {
			return fmt.Errorf("%s %s: it needs --pool-shared", f.flag, f.why)
		}
	}
	return nil
}

// DirPoolRequirements are what the directory pool's filesystem must show:
// --dir-pool-require's, else --shared-pool-require's.
func (o *Options) DirPoolRequirements() []string {
	switch {
	case o.DirPoolRequire == nil:
		return o.SharedPoolRequire
	case slices.Equal(o.DirPoolRequire, []string{"none"}):
		return nil
	}
	return o.DirPoolRequire
}
