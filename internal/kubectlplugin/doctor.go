package kubectlplugin

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"sigs.k8s.io/yaml"
)

// Severities of a finding.
const (
	// SevError: something is stuck or broken now.
	SevError = "error"
	// SevWarning: something will break, or needs an operator.
	SevWarning = "warning"
)

// Finding is one problem: what is wrong with which object, why, and what
// to do about it.
type Finding struct {
	Severity  string `json:"severity"`
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	Problem   string `json:"problem"`
	// Cause and Fix may hold several lines (one per cause found).
	Cause string `json:"cause"`
	Fix   string `json:"fix"`
	// pv is the PersistentVolume concerned, if any (describe filters on it).
	pv string
}

// Object names the object as kubectl spells it.
func (f Finding) Object() string {
	s := strings.ToLower(f.Kind) + "/" + f.Name
	switch f.Kind {
	case "PersistentVolume":
		s = "pv/" + f.Name
	case "PersistentVolumeClaim":
		s = "pvc/" + f.Name
	}
	if f.Namespace != "" {
		s += " -n " + f.Namespace
	}
	return s
}

// check is one doctor check.
type check func(c *cluster) []Finding

// checks run in this order; the output keeps it (most urgent first).
var checks = []check{
	checkDriver,
	checkTerminatingPVs,
	checkTerminatingPVCs,
	checkReleasedPVs,
	checkDataMovers, // before the claims it names
	checkPendingPVCs,
	checkStuckPods,
	checkGoneNodes,
	checkDownNodes,
	checkCapacity,
	checkUnenforcedSizes,
	checkDriverReports,
	checkVolumesWithoutPV,
}

// diagnose runs every check.
func diagnose(c *cluster) []Finding {
	var out []Finding
	for _, ch := range checks {
		out = append(out, ch(c)...)
	}
	return out
}

// printFindings writes the findings for a person.
func printFindings(w io.Writer, c *cluster, fs []Finding) {
	for _, f := range fs {
		fmt.Fprintf(w, "%-7s %s: %s\n", strings.ToUpper(f.Severity), f.Object(), f.Problem)
		writeIndented(w, "cause: ", f.Cause)
		writeIndented(w, "fix:   ", f.Fix)
		fmt.Fprintln(w)
	}
	errs, warns := 0, 0
	for _, f := range fs {
		if f.Severity == SevError {
			errs++
		} else {
			warns++
		}
	}
	scope := fmt.Sprintf("%s, %s checked", plural(len(c.pvs), c.driver+" volume"), plural(len(c.nodes), "node"))
	if len(fs) == 0 {
		fmt.Fprintf(w, "No problems found (%s).\n", scope)
	} else {
		fmt.Fprintf(w, "%s found: %s, %s (%s).\n", plural(len(fs), "problem"), plural(errs, "error"), plural(warns, "warning"), scope)
	}
}

func printNotes(w io.Writer, c *cluster) {
	for _, n := range c.notes {
		fmt.Fprintln(w, "note: "+n)
	}
	for _, node := range sortedKeys(c.viewErrs) {
		fmt.Fprintf(w, "note: no node-side view from node %s: %v\n", node, c.viewErrs[node])
	}
}

func writeIndented(w io.Writer, label, text string) {
	for i, line := range strings.Split(text, "\n") {
		if i > 0 {
			label = strings.Repeat(" ", len(label))
		}
		fmt.Fprintf(w, "  %s%s\n", label, line)
	}
}

// writeStructured writes v as JSON or YAML.
func writeStructured(w io.Writer, format string, v any) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	return fmt.Errorf("unknown output format %q (want json or yaml)", format)
}
