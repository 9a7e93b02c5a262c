package kubectlplugin

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/filevol/filevol/internal/nodeview/api"
	"k8s.io/apimachinery/pkg/api/resource"
)

// sizeStr formats n in binary units as kubectl users read them (1.5Gi).
func sizeStr(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	v := float64(n) / float64(div)
	suffix := []string{"Ki", "Mi", "Gi", "Ti", "Pi"}[exp]
	if v >= 100 || v == float64(int64(v)) {
		return fmt.Sprintf("%.0f%s", v, suffix)
	}
	return fmt.Sprintf("%.1f%s", v, suffix)
}

// quantity formats a resource quantity the same way.
func quantity(q *resource.Quantity) string {
	if q == nil {
		return "-"
	}
	return sizeStr(q.Value())
}

// age formats a duration like kubectl's AGE column (3m, 2h5m, 4d).
func age(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 24*time.Hour:
		h, m := int(d.Hours()), int(d.Minutes())%60
		if m == 0 {
			return fmt.Sprintf("%dh", h)
		}
		return fmt.Sprintf("%dh%dm", h, m)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// table writes aligned columns.
type table struct{ w *tabwriter.Writer }

func newTable(out io.Writer, header ...string) *table {
	t := &table{w: tabwriter.NewWriter(out, 0, 4, 3, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cells ...string) { fmt.Fprintln(t.w, strings.Join(cells, "\t")) }

func (t *table) flush() error { return t.w.Flush() }

// orDash returns s, or "-" when empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine squeezes a message onto one line.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// plural writes "1 volume", "2 volumes".
func plural(n int, noun string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// encryptionStr says whether a volume is encrypted at rest and whether its
// data key exists yet; never a key.
func encryptionStr(r api.Record) string {
	switch {
	case r.Encryption == "":
		return "none"
	case r.EncryptionKeyMade:
		return r.Encryption + ", data key wrapped in the record by the node-stage Secret's key (in the kernel only while staged)"
	}
	return r.Encryption + ", no data key yet (made at the first stage, from the node-stage Secret)"
}
