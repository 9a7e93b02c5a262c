package chartrender

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// pathToken is a run of characters a file path is made of.
var pathToken = regexp.MustCompile(`[A-Za-z0-9_./*-]+`)

// fileExts are the extensions that make a token a file name.
var fileExts = []string{".md", ".sh", ".yaml", ".go", ".json", ".tpl", ".txt"}

// TestDocFileReferences: every file the tooling's READMEs name exists in
// the repository, so a reader can open it. hack/tools/README.md once sent
// readers to a DESIGN.md that is not in the repository. A name counts as
// found relative to the README, to the repository root, or as the base name
// of any file in the repository (the READMEs name e2e/chart.sh as chart.sh).
// Globs (deploy/*.yaml) and URLs are skipped.
func TestDocFileReferences(t *testing.T) {
	chart, err := ChartDir()
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(chart, "..", "..")
	base := map[string]bool{}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "_output") {
			return filepath.SkipDir
		}
		base[d.Name()] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	url := regexp.MustCompile(`https?://\S+`)
	checked := 0
	for _, doc := range []string{"hack/tools/README.md", "deploy/README.md"} {
		b, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		for n, line := range strings.Split(string(b), "\n") {
			line = url.ReplaceAllString(line, "")
			for _, tok := range pathToken.FindAllString(line, -1) {
				tok = strings.TrimRight(tok, ".")
				if strings.Contains(tok, "*") || !hasFileExt(tok) {
					continue
				}
				checked++
				if exists(filepath.Join(root, filepath.Dir(doc), tok)) || exists(filepath.Join(root, tok)) || base[filepath.Base(tok)] {
					continue
				}
				t.Errorf("%s:%d names %s, which is not in the repository", doc, n+1, tok)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no file names found in the READMEs: the scan is broken")
	}
}

func hasFileExt(tok string) bool {
	for _, e := range fileExts {
		if strings.HasSuffix(tok, e) {
			return true
		}
	}
	return false
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
