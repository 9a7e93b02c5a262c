// Command filevol is the filevol CSI driver (default) and, as
// "filevol ctl ...", a small client for trying the driver by hand.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/app"
	"github.com/filevol/filevol/internal/ctl"
	"github.com/filevol/filevol/internal/options"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "ctl" {
		os.Exit(ctl.Main(os.Args[2:], os.Stdout, os.Stderr))
	}
	os.Exit(run(os.Args[1:]))
}

// newFlagSet is every flag `filevol --help` lists: the options and klog's.
// docs/flags.md's flag table documents this set (a test compares them).
func newFlagSet(o *options.Options) *flag.FlagSet {
	fs := flag.NewFlagSet("filevol", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are printed on one line by run
	o.AddFlags(fs)
	klog.InitFlags(fs)
	return fs
}

func run(args []string) int {
	var o options.Options
	fs := newFlagSet(&o)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(os.Stdout)
			fmt.Println("usage: filevol [flags]    (or: filevol ctl --help)")
			fs.PrintDefaults()
			return 0
		}
		fmt.Fprintf(os.Stderr, "filevol: %v (see filevol --help)\n", err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "filevol: unexpected argument %q (see filevol --help)\n", fs.Arg(0))
		return 2
	}
	if err := o.Validate(); err != nil {
		fmt.Fprintf(os.Stderr, "filevol: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := app.Run(ctx, o); err != nil {
		klog.ErrorS(err, "filevol failed")
		klog.Flush()
		return 1
	}
	klog.Flush()
	return 0
}
