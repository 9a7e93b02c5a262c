package app

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/options"
	"github.com/filevol/filevol/internal/sharedfs"
)

// sharedRisks are what a shared pool's filesystems lack and the operator
// accepted, or what filevol cannot check there.
type sharedRisks struct {
	// warnings are logged at start and shown in the node view.
	warnings []string
	// allowed is one line for every attach's warning; empty when nothing
	// was allowed.
	allowed string
	// poolKind is --pool-dir's filesystem (withFence).
	poolKind sharedfs.Kind
}

// waitSharedFS runs checkSharedFS until it passes or --shared-pool-wait
// has passed: the node's mount of the shared filesystem may come up after
// filevol (one waiting for the TLS files filevol installs does), and a
// pool directory not mounted yet fails the check (with
// --shared-pool-require=tls it is not GlusterFS). What the last check
// said is the error.
func waitSharedFS(ctx context.Context, o options.Options, check func(string) (sharedfs.Report, error)) (sharedRisks, error) {
	deadline := time.Now().Add(o.SharedPoolWait)
	var logged time.Time
	for {
		risks, err := checkSharedFS(o, check)
		if err == nil || !time.Now().Before(deadline) {
			return risks, err
		}
		if time.Since(logged) >= 15*time.Second {
			klog.InfoS("waiting for the shared pool's filesystem to pass its checks", "left", time.Until(deadline).Round(time.Second), "err", err)
			logged = time.Now()
		}
		select {
		case <-ctx.Done():
			return risks, fmt.Errorf("stopped while waiting for the shared pool's filesystem: %w", err)
		case <-time.After(time.Second):
		}
	}
}

// checkSharedFS checks the filesystem of every directory of a shared pool
// (--pool-dir, and --dir-pool-dir when set) against its kind's profile
// (internal/sharedfs): a requirement missing, or unreadable, that
// --shared-pool-unsafe-allow does not name refuses the start, with the
// setting and its fix. What it names, and a filesystem filevol does not
// know, are warnings, logged here.
func checkSharedFS(o options.Options, check func(string) (sharedfs.Report, error)) (sharedRisks, error) {
	// Each directory with what its filesystem must show and the flag that
	// asked for it.
	type dir struct {
		flag, path  string
		require     []string
		requireFlag string
	}
	dirs := []dir{{"--pool-dir", o.PoolDir, o.SharedPoolRequire, "--shared-pool-require"}}
	if o.DirPoolDir != "" {
		d := dir{"--dir-pool-dir", o.DirPoolDir, o.DirPoolRequirements(), "--shared-pool-require"}
		if o.DirPoolRequire != nil {
			d.requireFlag = "--dir-pool-require"
		}
		dirs = append(dirs, d)
	}
	var risks sharedRisks
	var allowed []string
	for _, d := range dirs {
		r, err := check(d.path)
		ok, err := sharedfs.Allow(err, o.SharedPoolUnsafeAllow)
		if err != nil {
			if len(sharedfs.Unmets(err)) == 0 {
				return risks, fmt.Errorf("shared pool %s (%s): cannot tell its filesystem: %w", d.path, d.flag, err)
			}
			return risks, fmt.Errorf("shared pool %s (%s) is on %s, which lacks what a shared pool's fencing and coherence need (docs/shared-pools-glusterfs.md); not started:\n%w",
				d.path, d.flag, where(r), err)
		}
		if slices.Contains(d.require, sharedfs.RequireTLS) {
			if u := sharedfs.TLSUnmet(r); u != nil {
				return risks, fmt.Errorf("shared pool %s (%s) is on %s, and %s=tls; not started: %s", d.path, d.flag, where(r), d.requireFlag, u.Describe())
			}
		}
		if d.flag == "--pool-dir" {
			risks.poolKind = r.Kind
		}
		klog.InfoS("shared pool filesystem checked", "flag", d.flag, "dir", d.path, "kind", r.Kind, "report", r.String(),
			"transport", transportName(r), "transportFrom", r.TransportFrom)
		risks.warnings = append(risks.warnings, r.Warnings...)
		for _, u := range ok {
			risks.warnings = append(risks.warnings, fmt.Sprintf("shared pool %s is UNSAFE, allowed by --shared-pool-unsafe-allow=%s: %s", d.path, u.Setting, u.Describe()))
			allowed = append(allowed, fmt.Sprintf("%s on %s", u.Setting, d.path))
		}
	}
	risks.allowed = strings.Join(allowed, ", ")
	for _, w := range risks.warnings {
		klog.Warning(w)
	}
	return risks, nil
}

// where names a report's filesystem for an error.
func where(r sharedfs.Report) string {
	s := fmt.Sprintf("%s %s mounted at %s", r.FSType, r.Source, r.MountPoint)
	if r.Volume != "" {
		s = fmt.Sprintf("GlusterFS volume %s (%s mounted at %s)", r.Volume, r.Source, r.MountPoint)
	}
	return s
}

// transportName is a report's transport for the start's log line:
// "unknown" when the client shows nothing of it.
func transportName(r sharedfs.Report) string {
	if r.Transport == sharedfs.TransportUnknown {
		return "unknown"
	}
	return string(r.Transport)
}
