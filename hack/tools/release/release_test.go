package release

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The part of GitHub's workflow syntax the release uses. Decoding is strict
// (KnownFields): a misspelt key fails here instead of on the first tag.
type workflow struct {
	Name        string            `yaml:"name"`
	On          trigger           `yaml:"on"`
	Permissions map[string]string `yaml:"permissions"`
	Env         map[string]string `yaml:"env"`
	Concurrency struct {
		Group            string `yaml:"group"`
		CancelInProgress bool   `yaml:"cancel-in-progress"`
	} `yaml:"concurrency"`
	Jobs map[string]job `yaml:"jobs"`
}

type trigger struct {
	Push struct {
		Tags []string `yaml:"tags"`
	} `yaml:"push"`
}

type job struct {
	RunsOn         string            `yaml:"runs-on"`
	TimeoutMinutes int               `yaml:"timeout-minutes"`
	Env            map[string]string `yaml:"env"`
	Steps          []step            `yaml:"steps"`
}

type step struct {
	Name string            `yaml:"name"`
	Uses string            `yaml:"uses"`
	With map[string]string `yaml:"with"`
	Run  string            `yaml:"run"`
	Env  map[string]string `yaml:"env"`
	If   string            `yaml:"if"`
}

func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

func load(t *testing.T) *workflow {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), ".github", "workflows", "release.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var w workflow
	if err := dec.Decode(&w); err != nil {
		t.Fatalf("release.yaml: %v", err)
	}
	return &w
}

// makeCalls are the `make` command lines of a step's script: targets and VAR=value arguments.
type makeCall struct {
	targets []string
	vars    map[string]string
}

// A make command: "make" where a command starts (or after "sudo env ..."),
// its arguments up to the end of the line or a shell operator. ${{ ... }}
// expressions are one word.
var (
	makeRE = regexp.MustCompile(`(?m)(?:^|[\s;&|(])make((?:[ \t]+[^\s;&|)"]+)*)(?:[ \t;&|)"]|$)`)
	exprRE = regexp.MustCompile(`\$\{\{\s*([^}]*?)\s*\}\}`)
)

func makeCalls(script string) []makeCall {
	script = exprRE.ReplaceAllString(script, "$${{$1}}")
	var calls []makeCall
	for _, m := range makeRE.FindAllStringSubmatch(script, -1) {
		c := makeCall{vars: map[string]string{}}
		fields := strings.Fields(m[1])
		for i := 0; i < len(fields); i++ {
			f := fields[i]
			switch {
			case f == "-C" || f == "-f":
				i++ // and its argument
			case strings.HasPrefix(f, "-"):
			case strings.Contains(f, "="):
				k, v, _ := strings.Cut(f, "=")
				c.vars[k] = v
			default:
				c.targets = append(c.targets, f)
			}
		}
		calls = append(calls, c)
	}
	return calls
}

// makefileTargets are the targets the Makefile (and what it includes) defines.
func makefileTargets(t *testing.T) map[string]bool {
	t.Helper()
	root := repoRoot(t)
	targets := map[string]bool{}
	for _, f := range []string{"Makefile", "test/e2e/cluster/cluster.mk"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`(?m)^([a-zA-Z0-9_-]+):`).FindAllStringSubmatch(string(b), -1) {
			targets[m[1]] = true
		}
	}
	return targets
}

// makeVar is the value of `NAME ?= value` in the Makefile.
func makeVar(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^` + name + `\s*\?=\s*(.*)$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no %s ?= in the Makefile", name)
	}
	return strings.TrimSpace(string(m[1]))
}

// chartRepository is charts/filevol/values.yaml's image.filevol.repository.
func chartRepository(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "charts", "filevol", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Image struct {
			Filevol struct {
				Repository string `yaml:"repository"`
			} `yaml:"filevol"`
		} `yaml:"image"`
	}
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v.Image.Filevol.Repository
}

// TestReleaseWorkflow: .github/workflows/release.yaml is valid YAML of the
// workflow syntax, runs on v* tags with the permissions it needs, and does
// in order: check the tag against the chart, make image, make push to the
// chart's default repository with the tag, compare the pushed platforms with
// the Makefile's, sign, make chart-package, a release with the chart and the
// digests. Every make target it runs exists.
func TestReleaseWorkflow(t *testing.T) {
	w := load(t)
	if !slices.Equal(w.On.Push.Tags, []string{"v*"}) {
		t.Errorf("on.push.tags %v, want [v*]", w.On.Push.Tags)
	}
	for k, v := range map[string]string{"contents": "write", "packages": "write", "id-token": "write"} {
		if w.Permissions[k] != v {
			t.Errorf("permissions.%s: %q, want %q", k, w.Permissions[k], v)
		}
	}
	if len(w.Jobs) != 1 {
		t.Fatalf("jobs %v, want one: release", w.Jobs)
	}
	j, ok := w.Jobs["release"]
	if !ok || j.RunsOn == "" || j.TimeoutMinutes == 0 {
		t.Fatalf("job release: %+v", j)
	}

	// GitHub has no runner context (runner.temp, runner.os) at the workflow's or a job's env.
	for _, env := range []map[string]string{w.Env, j.Env} {
		for k, v := range env {
			if strings.Contains(v, "runner.") {
				t.Errorf("env %s: %s: the runner context exists only in steps", k, v)
			}
		}
	}

	targets := makefileTargets(t)
	var order []string // what the steps do, in order
	var pushes []makeCall
	for i, s := range j.Steps {
		if (s.Uses == "") == (s.Run == "") {
			t.Errorf("step %d %q: exactly one of uses and run", i, s.Name)
		}
		if s.Name == "" {
			t.Errorf("step %d has no name", i)
		}
		if s.Uses != "" && !regexp.MustCompile(`^[\w.-]+/[\w.-]+@v\d+$`).MatchString(s.Uses) {
			t.Errorf("step %q: uses %q: want owner/action@vN", s.Name, s.Uses)
		}
		for _, c := range makeCalls(s.Run) {
			if _, ok := c.vars["PLATFORMS"]; ok {
				t.Errorf("step %q sets PLATFORMS: the release must build the Makefile's", s.Name)
			}
			for _, tg := range c.targets {
				if !targets[tg] {
					t.Errorf("step %q runs make %s: no such target in the Makefile", s.Name, tg)
				}
				order = append(order, "make "+tg)
				if tg == "push" {
					pushes = append(pushes, c)
				}
			}
		}
		switch {
		case strings.HasPrefix(s.Uses, "sigstore/cosign-installer@"):
			order = append(order, "cosign-installer")
		case strings.Contains(s.Run, "cosign sign"):
			order = append(order, "cosign sign")
		case strings.Contains(s.Run, "gh release create"):
			order = append(order, "gh release create")
			for _, asset := range []string{"_output/chart/*.tgz", "_output/images/digests.txt"} {
				if !strings.Contains(s.Run, asset) {
					t.Errorf("the release does not attach %s", asset)
				}
			}
		}
	}
	want := []string{"make print-app-version", "make image", "make push", "make print-platforms",
		"cosign-installer", "cosign sign", "make chart-package", "gh release create"}
	if !slices.Equal(order, want) {
		t.Errorf("the steps do\n  %s\nwant\n  %s", strings.Join(order, ", "), strings.Join(want, ", "))
	}

	// What it publishes is what make image builds, where the chart looks for it.
	if len(pushes) != 1 {
		t.Fatalf("%d make push calls", len(pushes))
	}
	if got, want := pushes[0].vars["REGISTRY"], chartRepository(t); got != want {
		t.Errorf("make push REGISTRY=%s, but the chart's default image.filevol.repository is %s", got, want)
	}
	if got := pushes[0].vars["TAG"]; got != "${{github.ref_name}}" {
		t.Errorf("make push TAG=%s, want the git tag ${{ github.ref_name }}", got)
	}
	for _, p := range strings.Fields(makeVar(t, "PLATFORMS")) {
		if p != "linux/amd64" && p != "linux/arm64" {
			t.Errorf("PLATFORMS has %s: hack/images.sh --multiarch builds linux/amd64 and linux/arm64", p)
		}
	}
}

// TestMakeCalls: the parser of make command lines the test above relies on.
func TestMakeCalls(t *testing.T) {
	script := "want=\"v$(make -s print-app-version)\"\n" +
		"sudo env \"PATH=$PATH\" \"HOME=$HOME\" make image\n" +
		"make push REGISTRY=ghcr.io/x/y TAG=${{ github.ref_name }}\n" +
		"cd x && make -C y a b V=1; echo makefile\n"
	var got []string
	for _, c := range makeCalls(script) {
		got = append(got, strings.Join(c.targets, "+"))
	}
	if want := []string{"print-app-version", "image", "push", "a+b"}; !slices.Equal(got, want) {
		t.Errorf("targets %q, want %q", got, want)
	}
}
