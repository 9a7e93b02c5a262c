// Command kubectl-filevol is the `kubectl filevol` plugin: put it on PATH
// and kubectl finds it. All logic is in internal/kubectlplugin.
package main

import (
	"os"

	"github.com/filevol/filevol/internal/kubectlplugin"
)

func main() { os.Exit(kubectlplugin.Main(os.Args[1:], os.Stdout, os.Stderr)) }
