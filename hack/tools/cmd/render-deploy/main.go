// Command render-deploy writes deploy/*.yaml from charts/filevol (see
// chartrender.DeployVariants), or with -check reports drift and exits 1.
// Run it through hack/render-deploy.sh.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/filevol/filevol/hack/tools/chartrender"
)

func main() {
	check := flag.Bool("check", false, "compare deploy/ with a fresh render instead of writing it")
	root := flag.String("root", ".", "repository root")
	flag.Parse()
	chart := filepath.Join(*root, "charts", "filevol")
	dir := filepath.Join(*root, "deploy")
	if *check {
		problems, err := chartrender.Drift(chart, dir)
		if err != nil {
			fail(err)
		}
		for _, p := range problems {
			fmt.Fprintln(os.Stderr, "deploy/"+p)
		}
		if len(problems) > 0 {
			fmt.Fprintln(os.Stderr, "run hack/render-deploy.sh")
			os.Exit(1)
		}
		return
	}
	files, err := chartrender.RenderDeploy(chart)
	if err != nil {
		fail(err)
	}
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p+".tmp", content, 0o644); err != nil {
			fail(err)
		}
		if err := os.Rename(p+".tmp", p); err != nil {
			fail(err)
		}
		fmt.Printf("wrote deploy/%s (%d bytes)\n", name, len(content))
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "render-deploy:", err)
	os.Exit(1)
}
