// Package docs checks the project's documents (README.md and docs/*.md)
// for what a reader depends on and a change can silently break: the
// README stays short and says how to run the driver and its tests on its
// first screen; every relative link leads to a file and every #anchor to a
// heading; docs/architecture.md has a section for every package under
// internal/ and cmd/, and the imports it forbids are not made; and no
// text speaks of the project's internal bookkeeping.
//
// The checks are plain functions that return the problems they find, so
// the tests run them on the repository and on a broken fixture
// (testdata/bad), which proves each one catches what it is for. No root,
// no network; the package list comes from `go list`.
package docs

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"unicode"
)

// Limits of the README.
const (
	readmeMaxLines  = 160
	firstScreen     = 40
	architecturePag = "docs/architecture.md"
)

// firstScreenCommands must appear within the README's first screen.
var firstScreenCommands = []string{"make run", "make test"}

// CheckReadme returns the README's problems: too long, or a command of
// firstScreenCommands missing from its first screen.
func CheckReadme(text string) []string {
	var probs []string
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if len(lines) > readmeMaxLines {
		probs = append(probs, fmt.Sprintf("README.md has %d lines, at most %d: move detail to docs/", len(lines), readmeMaxLines))
	}
	head := strings.Join(lines[:min(len(lines), firstScreen)], "\n")
	for _, c := range firstScreenCommands {
		if !strings.Contains(head, c) {
			probs = append(probs, fmt.Sprintf("README.md: %q is not in its first %d lines", c, firstScreen))
		}
	}
	return probs
}

// Documents lists README.md and docs/*.md under root, relative to root.
func Documents(root string) ([]string, error) {
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	out := []string{"README.md"}
	for _, d := range docs {
		rel, err := filepath.Rel(root, d)
		if err != nil {
			return nil, err
		}
		out = append(out, rel)
	}
	return out, nil
}

// prose returns the lines of a markdown text outside fenced code blocks,
// with inline code spans blanked, each with its line number.
func prose(text string) []numbered {
	var out []numbered
	outsideFences(text, func(n int, line string) {
		out = append(out, numbered{n, codeSpan.ReplaceAllString(line, "``")})
	})
	return out
}

// outsideFences calls fn with each line of a markdown text that is not in
// a fenced code block (``` or ~~~), and its line number.
func outsideFences(text string, fn func(n int, line string)) {
	fence := ""
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		t := strings.TrimLeft(line, " ")
		if fence != "" {
			if strings.HasPrefix(t, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
			fence = t[:3]
			continue
		}
		fn(n, line)
	}
}

type numbered struct {
	n    int
	text string
}

var (
	codeSpan = regexp.MustCompile("`[^`]*`")
	// link is an inline link or image: [text](target) or [text](target "title").
	link    = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	heading = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	// linkText is a link in a heading: its text is what the anchor is made of.
	linkText = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// Slug is the anchor GitHub gives a heading's text: lowercased, every
// character that is not a letter, a digit, a space, '-' or '_' dropped,
// and spaces made '-'.
func Slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Anchors returns the anchors of a markdown text's headings, as GitHub
// makes them (a repeated heading gets -1, -2, ...).
func Anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	outsideFences(text, func(_ int, line string) {
		m := heading.FindStringSubmatch(line)
		if m == nil {
			return
		}
		// The rendered text: a link's text, not its target.
		text := linkText.ReplaceAllString(m[2], "$1")
		s := Slug(text)
		if k := seen[s]; k > 0 {
			out[fmt.Sprintf("%s-%d", s, k)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	})
	return out
}

// CheckLinks returns every relative link of the documents under root that
// leads nowhere: to a file that does not exist, or to an #anchor that no
// heading of its page makes. Links with a scheme (https:, mailto:) are not
// followed.
func CheckLinks(root string, docs []string) []string {
	var probs []string
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) (map[string]bool, error) {
		if a, ok := anchors[path]; ok {
			return a, nil
		}
		b, err := os.ReadFile(filepath.Join(root, path))
		if err != nil {
			return nil, err
		}
		anchors[path] = Anchors(string(b))
		return anchors[path], nil
	}
	for _, doc := range docs {
		b, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			probs = append(probs, err.Error())
			continue
		}
		for _, l := range prose(string(b)) {
			for _, m := range link.FindAllStringSubmatch(l.text, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, frag, _ := strings.Cut(target, "#")
				path := doc
				if file != "" {
					path = filepath.Clean(filepath.Join(filepath.Dir(doc), file))
					if strings.HasPrefix(path, "..") {
						probs = append(probs, fmt.Sprintf("%s:%d: link %s leaves the repository", doc, l.n, target))
						continue
					}
					if _, err := os.Stat(filepath.Join(root, path)); err != nil {
						probs = append(probs, fmt.Sprintf("%s:%d: link %s: no file %s", doc, l.n, target, path))
						continue
					}
				}
				if frag == "" {
					continue
				}
				if !strings.HasSuffix(path, ".md") {
					probs = append(probs, fmt.Sprintf("%s:%d: link %s: an anchor into %s, which is not markdown", doc, l.n, target, path))
					continue
				}
				a, err := anchorsOf(path)
				if err != nil {
					probs = append(probs, fmt.Sprintf("%s:%d: link %s: %v", doc, l.n, target, err))
					continue
				}
				if !a[frag] {
					probs = append(probs, fmt.Sprintf("%s:%d: link %s: %s has no heading with anchor #%s", doc, l.n, target, path, frag))
				}
			}
		}
	}
	return probs
}

// Package is one package of the module: its path relative to the module
// (internal/pool) and the same of everything it depends on, directly or
// not (other modules' packages by their full import path).
type Package struct {
	Path string
	Deps []string
}

// mustNot is a "**Must not import:**" line of docs/architecture.md.
var mustNot = regexp.MustCompile(`^\*\*Must not import:\*\*\s*(.*)$`)

// sectionHeading is a package's heading in docs/architecture.md.
var sectionHeading = regexp.MustCompile("^### `([^`]+)`\\s*$")

// CheckArchitecture returns the problems of the architecture page against
// the module's packages: a package without a section of its own
// ("### `internal/x`"), a section for a package that does not exist, and
// an import that a section's "Must not import" line forbids. A pattern
// ending in "/..." forbids the package and everything under it; a path of
// another module forbids every package under it.
func CheckArchitecture(page string, pkgs []Package) []string {
	var probs []string
	byPath := map[string]Package{}
	for _, p := range pkgs {
		byPath[p.Path] = p
	}
	sections := map[string]bool{}
	current := ""
	for n, line := range strings.Split(page, "\n") {
		if m := sectionHeading.FindStringSubmatch(line); m != nil {
			current = m[1]
			sections[current] = true
			if _, ok := byPath[current]; !ok {
				probs = append(probs, fmt.Sprintf("%s:%d: a section for %s, which is not a package", architecturePag, n+1, current))
			}
			continue
		}
		if strings.HasPrefix(line, "#") {
			current = ""
		}
		m := mustNot.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		p, ok := byPath[current]
		if !ok {
			probs = append(probs, fmt.Sprintf("%s:%d: a \"Must not import\" line outside a package's section", architecturePag, n+1))
			continue
		}
		pats := codeSpan.FindAllString(m[1], -1)
		if len(pats) == 0 {
			probs = append(probs, fmt.Sprintf("%s:%d: \"Must not import\" names nothing", architecturePag, n+1))
		}
		for _, pat := range pats {
			pat = strings.Trim(pat, "`")
			for _, d := range p.Deps {
				if forbids(pat, d) {
					probs = append(probs, fmt.Sprintf("%s:%d: %s must not import %s, but depends on %s", architecturePag, n+1, p.Path, pat, d))
				}
			}
		}
	}
	for _, p := range pkgs {
		if !sections[p.Path] {
			probs = append(probs, fmt.Sprintf("%s: no section \"### `%s`\" for package %s", architecturePag, p.Path, p.Path))
		}
	}
	slices.Sort(probs)
	return slices.Compact(probs)
}

// forbids reports whether the pattern pat covers the dependency dep.
func forbids(pat, dep string) bool {
	if tree, ok := strings.CutSuffix(pat, "/..."); ok {
		return dep == tree || strings.HasPrefix(dep, tree+"/")
	}
	if strings.HasPrefix(pat, "internal/") || strings.HasPrefix(pat, "cmd/") {
		return dep == pat
	}
	return dep == pat || strings.HasPrefix(dep, pat+"/")
}

// internalWords are words of the project's bookkeeping that mean nothing
// to a reader of the documents.
var internalWords = regexp.MustCompile(`(?i)\bseed(s|ed|ing)?\b|\bissues?\s+#?\d+|\bsessions?\b`)

// CheckWords returns each line of the documents that uses an internal word.
func CheckWords(root string, docs []string) []string {
	var probs []string
	for _, doc := range docs {
		b, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			probs = append(probs, err.Error())
			continue
		}
		for n, line := range strings.Split(string(b), "\n") {
			if w := internalWords.FindString(line); w != "" {
				probs = append(probs, fmt.Sprintf("%s:%d: %q: say what it is, not where it came from", doc, n+1, w))
			}
		}
	}
	return probs
}
