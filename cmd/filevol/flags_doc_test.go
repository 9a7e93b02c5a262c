package main

import (
	"bufio"
	"flag"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/filevol/filevol/internal/options"
)

// docFlag is one row of docs/flags.md's flag table.
type docFlag struct {
	line     int
	defaults string // the default column as written
}

// flagRow matches a row such as "| `--pool-dir` | `/var/lib/filevol/pool` | meaning |".
var flagRow = regexp.MustCompile("^\\| `--([A-Za-z0-9_-]+)` \\| (.*?) \\| .* \\|$")

// flagsPage is the page that documents filevol's flags.
const flagsPage = "../../docs/flags.md"

// docFlags parses the rows of the table under the page's "# Flags" heading
// (up to the next "## " heading). A duplicated row is an error: the table
// would contradict itself.
func docFlags(t *testing.T, path string) map[string]docFlag {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows := map[string]docFlag{}
	in := false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(line, "# ") || strings.HasPrefix(line, "## ") {
			in = line == "# Flags"
			continue
		}
		if !in {
			continue
		}
		m := flagRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if prev, dup := rows[m[1]]; dup {
			t.Errorf("%s:%d: --%s is already in the table at line %d", path, n, m[1], prev.line)
		}
		rows[m[1]] = docFlag{line: n, defaults: m[2]}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(rows) == 0 {
		t.Fatalf("%s: no flag rows under \"# Flags\"", path)
	}
	return rows
}

// codeSpan is the first `...` of s, if s starts with one.
var codeSpan = regexp.MustCompile("^`([^`]*)`")

// TestFlagTable compares docs/flags.md's flag table with the flags
// `filevol --help` lists: a flag missing from the table, a row for a flag
// that does not exist, or a default the table gets wrong fails. Users and the
// chart read that table; it drifted before (--defer-expansion-to-node, which
// the chart sets, was missing).
//
// The default column is either a code span, which must be the flag's real
// default (durations compared as durations: `10m` is 10m0s), or prose, which
// is allowed only where the flag has no fixed default: its default is empty
// ("off", "the --endpoint path") or depends on the machine (the host name).
func TestFlagTable(t *testing.T) {
	var o options.Options
	fs := newFlagSet(&o)
	rows := docFlags(t, flagsPage)

	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	// Defaults that are the machine's, written as prose in the table.
	machine := map[string]struct{ value, prose string }{
		"node-id": {host, "host name"},
	}

	seen := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) {
		seen[f.Name] = true
		row, ok := rows[f.Name]
		if !ok {
			t.Errorf("--%s (default %q) is not in docs/flags.md's flag table", f.Name, f.DefValue)
			return
		}
		if m := codeSpan.FindStringSubmatch(row.defaults); m != nil {
			if !sameDefault(f, m[1]) {
				t.Errorf("docs/flags.md:%d: --%s default `%s`, but the flag's default is %q", row.line, f.Name, m[1], f.DefValue)
			}
			return
		}
		if md, ok := machine[f.Name]; ok {
			if f.DefValue != md.value || !strings.Contains(row.defaults, md.prose) {
				t.Errorf("docs/flags.md:%d: --%s default %q, want prose naming the %s (the flag's default is %q)", row.line, f.Name, row.defaults, md.prose, f.DefValue)
			}
			return
		}
		if f.DefValue != "" {
			t.Errorf("docs/flags.md:%d: --%s default %q is prose, but the flag's default is %q: write it as `%s`", row.line, f.Name, row.defaults, f.DefValue, f.DefValue)
		}
	})
	var extra []string
	for name := range rows {
		if !seen[name] {
			extra = append(extra, name)
		}
	}
	sort.Strings(extra)
	for _, name := range extra {
		t.Errorf("docs/flags.md:%d: --%s is in the flag table but filevol has no such flag", rows[name].line, name)
	}
}

// sameDefault reports whether the page's default text is f's default.
func sameDefault(f *flag.Flag, text string) bool {
	if text == f.DefValue {
		return true
	}
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return false
	}
	if _, isDur := g.Get().(time.Duration); !isDur {
		return false
	}
	want, err1 := time.ParseDuration(f.DefValue)
	got, err2 := time.ParseDuration(text)
	return err1 == nil && err2 == nil && want == got
}

// TestFlagRowPattern guards the parser: a row the pattern skipped would make
// the table look complete while a flag was really missing.
func TestFlagRowPattern(t *testing.T) {
	for line, want := range map[string]string{
		"| `--pool-dir` | `/var/lib/filevol/pool` | storage pool directory |": "pool-dir",
		"| `--log_file` | off | klog: x |":                                    "log_file",
		"| `--v` | `0` | verbosity |":                                         "v",
		"| flag | default | meaning |":                                        "",
		"|---|---|---|":                                                       "",
	} {
		got := ""
		if m := flagRow.FindStringSubmatch(line); m != nil {
			got = m[1]
		}
		if got != want {
			t.Errorf("%q: parsed flag %q, want %q", line, got, want)
		}
	}
}
