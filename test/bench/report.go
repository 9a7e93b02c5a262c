package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// row is one line of the targets table. A row without a goal is reported
// only (a p90 next to a p50 target, say); goals are never asserted.
type row struct {
	id, what, measured, goal string
	// pass is meaningful only when goal is set.
	pass bool
}

// report collects what a run measured; it is rendered even when the run
// aborts half-way, so a failure still leaves its figures behind.
type report struct {
	started  time.Time
	machine  []string
	settings string
	rows     []row
	details  [][2]string
	notes    []string
	aborted  error
}

func (r *report) target(id, what, measured, goal string, pass bool) {
	r.rows = append(r.rows, row{id, what, measured, goal, pass})
}

func (r *report) info(id, what, measured string) {
	r.rows = append(r.rows, row{id: id, what: what, measured: measured})
}

func (r *report) detail(k, format string, a ...any) {
	r.details = append(r.details, [2]string{k, fmt.Sprintf(format, a...)})
}

func (r *report) note(format string, a ...any) { r.notes = append(r.notes, fmt.Sprintf(format, a...)) }

func (r *report) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# filevol benchmark, %s\n\n", r.started.Format(time.RFC3339))
	for _, m := range r.machine {
		fmt.Fprintf(&b, "- %s\n", m)
	}
	fmt.Fprintf(&b, "- Settings: %s\n\n", r.settings)
	if r.aborted != nil {
		fmt.Fprintf(&b, "**RUN ABORTED: %v** (figures below are partial)\n\n", r.aborted)
	}
	b.WriteString("| # | Measurement | Measured | Target | Result |\n|---|---|---|---|---|\n")
	// In target order, not in the order the phases happened to run.
	rows := slices.Clone(r.rows)
	slices.SortStableFunc(rows, func(a, b row) int { return strings.Compare(a.id, b.id) })
	for _, x := range rows {
		goal, res := "—", "—"
		if x.goal != "" {
			goal, res = x.goal, "MISS"
			if x.pass {
				res = "PASS"
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", x.id, x.what, x.measured, goal, res)
	}
	if len(r.details) > 0 {
		b.WriteString("\n## Details\n\n| Measurement | Value |\n|---|---|\n")
		for _, d := range r.details {
			fmt.Fprintf(&b, "| %s | %s |\n", d[0], d[1])
		}
	}
	if len(r.notes) > 0 {
		b.WriteString("\n## Notes\n\n")
		for _, n := range r.notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	return b.String()
}

// machineFacts describes the host: the targets mean little without the
// CPU count, the kernel and how busy the machine was.
func machineFacts(poolDir string) []string {
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	load, _ := os.ReadFile("/proc/loadavg")
	return []string{
		fmt.Sprintf("Machine: %d CPUs (nproc), %s, %s RAM, kernel %s",
			runtime.NumCPU(), procField("/proc/cpuinfo", "model name"), procField("/proc/meminfo", "MemTotal"),
			unix.ByteSliceToString(uts.Release[:])),
		fmt.Sprintf("Load average at start: %s (other work on this machine skews the figures)",
			strings.Join(strings.Fields(string(load))[:3], " ")),
		fmt.Sprintf("Pool: %s on %s", poolDir, poolFS(poolDir)),
		fmt.Sprintf("Harness: %s, one process, gRPC over the driver's unix socket", runtime.Version()),
	}
}

// procField returns the value of the first "key: value" line of a /proc file.
func procField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return "?"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

// poolFS names the filesystem holding dir.
func poolFS(dir string) string {
	m, err := mountOf(dir)
	if err != nil {
		return "? (" + err.Error() + ")"
	}
	kind := m.FSType
	if kind == "ext4" {
		kind += " " + ext4Journal(m.Source)
	}
	return fmt.Sprintf("%s (%s mounted at %s, options %s, %s)", kind, m.Source, m.Mountpoint, m.Options, m.VFSOptions)
}

// mountOf returns the mount holding dir: the one with the longest mount
// point that contains it, read from mountinfo.
func mountOf(dir string) (*mountinfo.Info, error) {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		real = dir
	}
	mounts, err := mountinfo.GetMounts(nil)
	if err != nil {
		return nil, err
	}
	var best *mountinfo.Info
	for _, m := range mounts {
		if (real == m.Mountpoint || strings.HasPrefix(real, strings.TrimSuffix(m.Mountpoint, "/")+"/")) &&
			(best == nil || len(m.Mountpoint) >= len(best.Mountpoint)) {
			best = m
		}
	}
	if best == nil {
		return nil, fmt.Errorf("no mount holds %s", dir)
	}
	return best, nil
}
