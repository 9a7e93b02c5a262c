package app

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/filevol/filevol/internal/options"
	"github.com/filevol/filevol/internal/sharedfs"
)

// The flag's names are sharedfs's settings.
func TestUnsafeSettingsAreSharedfsSettings(t *testing.T) {
	if !slices.Equal(options.UnsafeSharedSettings, sharedfs.Settings()) {
		t.Errorf("options.UnsafeSharedSettings %v, sharedfs.Settings() %v", options.UnsafeSharedSettings, sharedfs.Settings())
	}
}

// fakeGluster answers Check for every directory as a GlusterFS client
// lacking the named settings.
func fakeGluster(missing ...string) func(string) (sharedfs.Report, error) {
	return func(dir string) (sharedfs.Report, error) {
		r := sharedfs.Report{Dir: dir, Kind: sharedfs.KindGlusterFS, FSType: "fuse.glusterfs", Source: "srv:vol", MountPoint: "/mnt/shared", Volume: "vol"}
		var errs []error
		for _, s := range missing {
			errs = append(errs, &sharedfs.Unmet{Setting: s, Want: "on", Found: "off", Why: "why", Fix: "gluster volume set vol " + s + " on"})
		}
		return r, errors.Join(errs...)
	}
}

// Every directory of a shared pool is checked; a missing requirement not
// allowed refuses the start, naming the setting, its fix and the
// override; allowed ones become warnings and the attach warning.
func TestCheckSharedFS(t *testing.T) {
	o := options.Options{PoolShared: true, PoolDir: "/mnt/shared/pool", DirPoolDir: "/mnt/dirs"}
	var checked []string
	risks, err := checkSharedFS(o, func(dir string) (sharedfs.Report, error) {
		checked = append(checked, dir)
		return sharedfs.Report{Dir: dir, Kind: sharedfs.KindLocal}, nil
	})
	if err != nil || len(risks.warnings) != 0 || risks.allowed != "" || !slices.Equal(checked, []string{o.PoolDir, o.DirPoolDir}) {
		t.Errorf("all met: %+v, %v, checked %v", risks, err, checked)
	}

	_, err = checkSharedFS(o, fakeGluster("strict-locks", "entry-timeout"))
	for _, want := range []string{"shared pool /mnt/shared/pool (--pool-dir) is on GlusterFS volume vol (srv:vol mounted at /mnt/shared)", "not started",
		"strict-locks: off, want on (why); fix: gluster volume set vol strict-locks on; or accept the risk with --shared-pool-unsafe-allow=strict-locks",
		"--shared-pool-unsafe-allow=entry-timeout"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("refusal lacks %q: %v", want, err)
		}
	}

	o.SharedPoolUnsafeAllow = []string{"entry-timeout"}
	_, err = checkSharedFS(o, fakeGluster("strict-locks", "entry-timeout"))
	if err == nil || strings.Contains(err.Error(), "entry-timeout") || !strings.Contains(err.Error(), "strict-locks") {
		t.Errorf("entry-timeout allowed, strict-locks not: %v", err)
	}

	o.SharedPoolUnsafeAllow = []string{"strict-locks", "entry-timeout"}
	risks, err = checkSharedFS(o, fakeGluster("strict-locks", "entry-timeout"))
	if err != nil || len(risks.warnings) != 4 || risks.allowed != "strict-locks on /mnt/shared/pool, entry-timeout on /mnt/shared/pool, strict-locks on /mnt/dirs, entry-timeout on /mnt/dirs" {
		t.Fatalf("both allowed: %+v, %v", risks, err)
	}
	if w := risks.warnings[0]; !strings.HasPrefix(w, "shared pool /mnt/shared/pool is UNSAFE, allowed by --shared-pool-unsafe-allow=strict-locks: strict-locks: off, want on") ||
		strings.Contains(w, "or accept the risk") {
		t.Errorf("warning %q", w)
	}

	_, err = checkSharedFS(o, func(dir string) (sharedfs.Report, error) {
		return sharedfs.Report{Dir: dir}, errors.New("statfs: input/output error")
	})
	if err == nil || !strings.Contains(err.Error(), "cannot tell its filesystem: statfs") {
		t.Errorf("unidentified: %v", err)
	}
}

// --shared-pool-require=tls refuses a pool whose client is not on TLS
// (naming the setting and the fix) and serves one that is; without the
// flag a clear client is served, and its transport only logged.
func TestCheckSharedFSRequireTLS(t *testing.T) {
	report := func(tr sharedfs.Transport) func(string) (sharedfs.Report, error) {
		return func(dir string) (sharedfs.Report, error) {
			return sharedfs.Report{Dir: dir, Kind: sharedfs.KindGlusterFS, FSType: "fuse.glusterfs", Source: "srv:vol", MountPoint: "/mnt/shared",
				Volume: "vol", Transport: tr, TransportFrom: "transport.socket.ssl-enabled " + map[bool]string{true: "on", false: "off"}[tr == sharedfs.TransportTLS]}, nil
		}
	}
	o := options.Options{PoolShared: true, PoolDir: "/mnt/shared/pool"}
	if _, err := checkSharedFS(o, report(sharedfs.TransportClear)); err != nil {
		t.Errorf("not required: %v", err)
	}
	o.SharedPoolRequire = []string{"tls"}
	_, err := checkSharedFS(o, report(sharedfs.TransportClear))
	for _, want := range []string{"shared pool /mnt/shared/pool (--pool-dir) is on GlusterFS volume vol", "--shared-pool-require=tls; not started",
		"tls: transport.socket.ssl-enabled off, want TLS", "gluster volume set vol client.ssl on"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("refusal lacks %q: %v", want, err)
		}
	}
	if _, err := checkSharedFS(o, report(sharedfs.TransportTLS)); err != nil {
		t.Errorf("tls: %v", err)
	}

	// A directory pool on a local btrfs beside an image pool on GlusterFS:
	// it has --shared-pool-require's unless --dir-pool-require says.
	o.DirPoolDir = "/mnt/dirs"
	mixed := func(dir string) (sharedfs.Report, error) {
		if dir == o.DirPoolDir {
			return sharedfs.Report{Dir: dir, Kind: sharedfs.KindLocal, FSType: "btrfs", Source: "/dev/loop5", MountPoint: "/mnt/dirs"}, nil
		}
		return report(sharedfs.TransportTLS)(dir)
	}
	if _, err := checkSharedFS(o, mixed); err == nil || !strings.Contains(err.Error(), "/mnt/dirs (--dir-pool-dir) is on btrfs /dev/loop5 mounted at /mnt/dirs, and --shared-pool-require=tls") {
		t.Errorf("directory pool inheriting tls: %v", err)
	}
	o.DirPoolRequire = []string{"none"}
	if _, err := checkSharedFS(o, mixed); err != nil {
		t.Errorf("--dir-pool-require=none: %v", err)
	}
	o.DirPoolRequire, o.SharedPoolRequire = []string{"tls"}, nil
	if _, err := checkSharedFS(o, mixed); err == nil || !strings.Contains(err.Error(), "and --dir-pool-require=tls; not started") {
		t.Errorf("--dir-pool-require=tls alone: %v", err)
	}
}

// The flag's names are sharedfs's.
func TestSharedRequirements(t *testing.T) {
	if !slices.Equal(options.SharedRequirements, []string{sharedfs.RequireTLS}) {
		t.Errorf("options.SharedRequirements %v", options.SharedRequirements)
	}
}

// --shared-pool-wait: the start waits while the check fails (a pool
// directory whose GlusterFS mount comes up later), serves once it passes,
// gives the last refusal when the wait ends, and stops with its context.
func TestWaitSharedFS(t *testing.T) {
	o := options.Options{PoolShared: true, PoolDir: "/mnt/shared/pool", SharedPoolRequire: []string{"tls"}, SharedPoolWait: time.Minute}
	calls := 0
	mountedOnThird := func(dir string) (sharedfs.Report, error) {
		calls++
		if calls < 3 {
			return sharedfs.Report{Dir: dir, Kind: sharedfs.KindLocal, FSType: "ext4", Source: "/dev/root", MountPoint: "/"}, nil
		}
		return sharedfs.Report{Dir: dir, Kind: sharedfs.KindGlusterFS, FSType: "fuse.glusterfs", Source: "srv:vol", MountPoint: "/mnt/shared",
			Volume: "vol", Transport: sharedfs.TransportTLS}, nil
	}
	if _, err := waitSharedFS(context.Background(), o, mountedOnThird); err != nil || calls != 3 {
		t.Fatalf("mounted at the third check: %v after %d checks", err, calls)
	}

	o.SharedPoolWait = 0
	calls = 0
	_, err := waitSharedFS(context.Background(), o, mountedOnThird)
	if err == nil || calls != 1 || !strings.Contains(err.Error(), "--shared-pool-require=tls; not started") {
		t.Fatalf("no wait: %v after %d checks, want the refusal at once", err, calls)
	}

	o.SharedPoolWait = time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	calls = 0
	never := func(dir string) (sharedfs.Report, error) {
		if calls++; calls == 2 {
			cancel()
		}
		return sharedfs.Report{Dir: dir, Kind: sharedfs.KindLocal}, nil
	}
	_, err = waitSharedFS(ctx, o, never)
	if err == nil || !strings.Contains(err.Error(), "stopped while waiting") || !strings.Contains(err.Error(), "not started") {
		t.Fatalf("cancelled: %v", err)
	}
}
