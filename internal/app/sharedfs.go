package app

import (
	"fmt"
	"slices"
	"strings"

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

// checkSharedFS checks the filesystem of every directory of a shared pool
// (--pool-dir, and --dir-pool-dir when set) against its kind's profile
// (internal/sharedfs): a requirement missing, or unreadable, that
// --shared-pool-unsafe-allow does not name refuses the start, with the
// setting and its fix. What it names, and a filesystem filevol does not
// know, are warnings, logged here.
func checkSharedFS(o options.Options, check func(string) (sharedfs.Report, error)) (sharedRisks, error) {
	dirs := [][2]string{{"--pool-dir", o.PoolDir}}
	if o.DirPoolDir != "" {
		dirs = append(dirs, [2]string{"--dir-pool-dir", o.DirPoolDir})
	}
	var risks sharedRisks
	var allowed []string
	for _, d := range dirs {
		r, err := check(d[1])
		ok, err := sharedfs.Allow(err, o.SharedPoolUnsafeAllow)
		if err != nil {
			if len(sharedfs.Unmets(err)) == 0 {
				return risks, fmt.Errorf("shared pool %s (%s): cannot tell its filesystem: %w", d[1], d[0], err)
			}
			return risks, fmt.Errorf("shared pool %s (%s) is on %s, which lacks what a shared pool's fencing and coherence need (docs/shared-pools-glusterfs.md); not started:\n%w",
				d[1], d[0], where(r), err)
		}
		if slices.Contains(o.SharedPoolRequire, sharedfs.RequireTLS) {
			if u := sharedfs.TLSUnmet(r); u != nil {
				return risks, fmt.Errorf("shared pool %s (%s) is on %s, and --shared-pool-require=tls; not started: %s", d[1], d[0], where(r), u.Describe())
			}
		}
		if d[0] == "--pool-dir" {
			risks.poolKind = r.Kind
		}
		klog.InfoS("shared pool filesystem checked", "flag", d[0], "dir", d[1], "kind", r.Kind, "report", r.String(),
			"transport", transportName(r), "transportFrom", r.TransportFrom)
		risks.warnings = append(risks.warnings, r.Warnings...)
		for _, u := range ok {
			risks.warnings = append(risks.warnings, fmt.Sprintf("shared pool %s is UNSAFE, allowed by --shared-pool-unsafe-allow=%s: %s", d[1], u.Setting, u.Describe()))
			allowed = append(allowed, fmt.Sprintf("%s on %s", u.Setting, d[1]))
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
