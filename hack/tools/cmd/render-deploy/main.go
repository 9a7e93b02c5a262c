// Command render-deploy writes deploy/*.yaml from charts/filevol (see
// chartrender.DeployVariants), or with -check reports drift and exits 1.
// -image REPOSITORY[:TAG] renders them with that driver image (an image
// pushed with `make push`) into -out (default _output/deploy, never deploy/,
// which keeps the chart's default). Run it through hack/render-deploy.sh
// (make deploy [IMAGE=...]).
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
	image := flag.String("image", "", "driver image REPOSITORY[:TAG] instead of the chart's default (written to -out)")
	outDir := flag.String("out", "", "directory to write to (default deploy/, or _output/deploy with -image)")
	flag.Parse()
	chart := filepath.Join(*root, "charts", "filevol")
	dir := filepath.Join(*root, "deploy")
	if *image != "" {
		dir = filepath.Join(*root, "_output", "deploy")
	}
	if *outDir != "" {
		dir = *outDir
	}
	if *check && *image != "" {
		fail(fmt.Errorf("-check compares deploy/ with the chart's default image; -image writes elsewhere"))
	}
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
	files, err := chartrender.RenderDeployImage(chart, *image)
	if err != nil {
		fail(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
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
		fmt.Printf("wrote %s (%d bytes)\n", p, len(content))
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "render-deploy:", err)
	os.Exit(1)
}
