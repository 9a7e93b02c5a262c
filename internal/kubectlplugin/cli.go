package kubectlplugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// DefaultDriver is the CSI driver name looked for unless --driver says otherwise.
const DefaultDriver = "filevol.csi.io"

const usage = `kubectl filevol — what filevol volumes are doing, and why one is stuck

Usage:
  kubectl filevol volumes [-o json|yaml]       every filevol volume: PV, claim, node, size, used, state
  kubectl filevol describe pvc/NAME [-n NS]    the chain PVC → PV → VolumeAttachment → node → pods,
  kubectl filevol describe pv/NAME             the driver's own view from the node, events, problems
  kubectl filevol doctor [-o json|yaml]        every problem found, with its cause and the fix

The node-side view comes from the driver's read-only /debug/volumes, reached
through a port-forward to the driver pod on each node (--via), or at
--driver-url for a driver run on the host.

Flags:
`

// Options are the plugin's own flags.
type Options struct {
	Driver          string
	DriverSelector  string
	DriverNamespace string
	DriverURL       string
	Via             string
	Output          string
	Timeout         time.Duration
	// MinAge is how long a claim or pod may wait before doctor calls it stuck,
	// and how old a volume no PersistentVolume names must be before doctor names it.
	MinAge time.Duration
}

// Main runs the plugin and returns its exit code: 0 done, 1 failed, 2 usage.
func Main(args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("kubectl-filevol", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	loading := clientcmd.NewDefaultClientConfigLoadingRules()
	overrides := &clientcmd.ConfigOverrides{}
	fs.StringVar(&loading.ExplicitPath, "kubeconfig", "", "path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
	clientcmd.BindOverrideFlags(overrides, fs, clientcmd.RecommendedConfigOverrideFlags(""))
	var o Options
	fs.StringVar(&o.Driver, "driver", DefaultDriver, "CSI driver name")
	fs.StringVar(&o.DriverSelector, "driver-selector", "app.kubernetes.io/name=filevol", "label selector of the driver's pods (empty: do not look for them)")
	fs.StringVar(&o.DriverNamespace, "driver-namespace", "", "namespace of the driver's pods (default: all)")
	fs.StringVar(&o.DriverURL, "driver-url", os.Getenv("KUBECTL_FILEVOL_DRIVER_URL"), "base URL of a driver's --http-endpoint, {node} replaced by the node name (a driver run on the host; default $KUBECTL_FILEVOL_DRIVER_URL)")
	fs.StringVar(&o.Via, "via", viaPortForward, "how to reach the driver pods' /debug/volumes: port-forward, proxy (API server pod proxy; needs the endpoint on the pod IP) or none")
	fs.StringVarP(&o.Output, "output", "o", "", "output format: json or yaml (volumes, doctor)")
	fs.DurationVar(&o.Timeout, "node-timeout", 10*time.Second, "how long to wait for one node's driver")
	fs.DurationVar(&o.MinAge, "min-age", time.Minute, "how long a claim or pod may wait before doctor calls it stuck, and how old a volume without a PersistentVolume must be before doctor names it")
	help := fs.BoolP("help", "h", false, "show this help")
	if err := fs.Parse(args); err != nil {
		fmt.Fprintf(stderr, "kubectl-filevol: %v (see kubectl filevol --help)\n", err)
		return 2
	}
	if *help || fs.NArg() == 0 {
		fmt.Fprint(stdout, usage+fs.FlagUsages())
		if *help {
			return 0
		}
		return 2
	}
	switch o.Via {
	case viaPortForward, viaProxy, viaNone:
	default:
		fmt.Fprintf(stderr, "kubectl-filevol: --via %q must be port-forward, proxy or none\n", o.Via)
		return 2
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(loading, overrides)
	cfg, err := cc.ClientConfig()
	if err != nil {
		fmt.Fprintf(stderr, "kubectl-filevol: %v\n", err)
		return 1
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		fmt.Fprintf(stderr, "kubectl-filevol: %v\n", err)
		return 1
	}
	cfg.UserAgent = "kubectl-filevol"
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "kubectl-filevol: %v\n", err)
		return 1
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "kubectl-filevol: %v\n", err)
		return 1
	}
	err = Run(context.Background(), Env{Clients: cs, Dynamic: dyn, Config: cfg, Namespace: ns, Now: time.Now(), Out: stdout, Err: stderr}, o, fs.Args())
	var ue usageError
	switch {
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "kubectl-filevol: %v (see kubectl filevol --help)\n", err)
		return 2
	case err != nil:
		fmt.Fprintf(stderr, "kubectl-filevol: %v\n", err)
		return 1
	}
	return 0
}

// Env is what a command runs against; tests pass a fake clientset.
type Env struct {
	Clients kubernetes.Interface
	// Dynamic reads what has no typed client (velero's data movers); nil
	// leaves those checks out.
	Dynamic   dynamic.Interface
	Config    *rest.Config
	Namespace string
	Now       time.Time
	Out, Err  io.Writer
	// viewer overrides how node views are fetched (tests).
	viewer viewer
}

type usageError struct{ error }

// Run runs one command (args[0]) with its arguments.
func Run(ctx context.Context, env Env, o Options, args []string) error {
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "volumes", "describe", "doctor":
	default:
		return usageError{fmt.Errorf("unknown command %q", cmd)}
	}
	if (cmd == "describe") != (len(rest) == 1) || (cmd != "describe" && len(rest) > 0) {
		return usageError{fmt.Errorf("%s: unexpected arguments %q", cmd, rest)}
	}
	if o.Output != "" && o.Output != "json" && o.Output != "yaml" {
		return usageError{fmt.Errorf("-o %q must be json or yaml", o.Output)}
	}
	c, err := load(ctx, env.Clients, loadOptions{driver: o.Driver, driverSelector: o.DriverSelector,
		driverNamespace: o.DriverNamespace, now: env.Now, grace: o.MinAge, dynamic: env.Dynamic})
	if err != nil {
		return err
	}
	defer printNotes(env.Err, c)
	v := env.viewer
	switch {
	case v != nil:
	case o.DriverURL != "":
		v = urlViewer{template: o.DriverURL, client: &http.Client{}}
	case o.Via != viaNone:
		v = podViewer{cfg: env.Config, cs: env.Clients, pods: c.driverPods, defaultPort: 9808, via: o.Via}
	}
	var t target
	nodes := c.nodesToAsk()
	if cmd == "describe" {
		if t, err = resolve(c, rest[0], env.Namespace); err != nil {
			return err
		}
		nodes = nil
		if t.pv != nil && c.nodeOf(t.pv) != "" {
			nodes = []string{c.nodeOf(t.pv)}
		}
	}
	if v != nil {
		fetchViews(ctx, c, v, nodes, o.Timeout)
	}
	switch cmd {
	case "volumes":
		rows := volumeRows(c)
		if o.Output != "" {
			return writeStructured(env.Out, o.Output, rows)
		}
		err = printVolumes(env.Out, c, rows)
	case "describe":
		describe(env.Out, c, t)
	case "doctor":
		fs := diagnose(c)
		if o.Output != "" {
			if fs == nil {
				fs = []Finding{}
			}
			return writeStructured(env.Out, o.Output, fs)
		}
		printFindings(env.Out, c, fs)
	}
	return err
}
