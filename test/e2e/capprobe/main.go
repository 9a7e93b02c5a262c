// Command capprobe asks a running filevol which optional CSI capabilities it
// advertises, and renders the e2e test-driver definition accordingly: a
// capability line in the template marked "# requires: WORD..." stays true
// only when the driver advertises every WORD, otherwise it becomes false.
// This keeps test/e2e/testdriver.yaml the single list of what filevol can do,
// while tests for features still being built (snapshots, clones, expansion)
// run as soon as the driver says it has them, and not before.
//
// Words are "plugin:<Service or VolumeExpansion type>", "controller:<RPC type>"
// and "node:<RPC type>", spelled as in the CSI spec's enums, e.g.
// controller:CREATE_DELETE_SNAPSHOT, node:EXPAND_VOLUME, plugin:ONLINE.
//
//	capprobe -endpoint unix:///var/lib/kubelet/plugins/filevol.csi.io/csi.sock            # print the words
//	capprobe -endpoint ... -template test/e2e/testdriver.yaml -out _output/e2e/testdriver.yaml
//
// A driver whose controller and node services are separate processes (the
// shared-pool driver: a controller Deployment, a node plugin per node) is
// probed at both sockets, -endpoint unix:///node.sock,unix:///controller.sock:
// the words are what either advertises.
//
// It imports nothing of the driver: it speaks CSI only, as the sidecars do.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

func main() {
	endpoint := flag.String("endpoint", "", "CSI endpoint, unix:///path; several, comma-separated, for a driver split into processes")
	template := flag.String("template", "", "test-driver yaml with '# requires:' markers (optional)")
	out := flag.String("out", "", "where to write the rendered yaml (with -template)")
	timeout := flag.Duration("timeout", 30*time.Second, "how long to wait for the driver")
	flag.Parse()
	if *endpoint == "" || (*template == "") != (*out == "") {
		fmt.Fprintln(os.Stderr, "usage: capprobe -endpoint unix:///path [-template IN -out OUT]")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	caps := map[string]bool{}
	for _, ep := range strings.Split(*endpoint, ",") {
		c, err := probe(ctx, ep)
		if err != nil {
			fmt.Fprintln(os.Stderr, "capprobe:", ep+":", err)
			os.Exit(1)
		}
		for w := range c {
			caps[w] = true
		}
	}
	if *template == "" {
		for _, w := range sortedWords(caps) {
			fmt.Println(w)
		}
		return
	}
	report, err := render(*template, *out, caps)
	if err != nil {
		fmt.Fprintln(os.Stderr, "capprobe:", err)
		os.Exit(1)
	}
	fmt.Print(report)
}

// probe returns the set of capability words the driver advertises. It
// retries until the socket answers or ctx ends (the driver may be starting).
func probe(ctx context.Context, endpoint string) (map[string]bool, error) {
	if !strings.HasPrefix(endpoint, "unix://") {
		return nil, fmt.Errorf("endpoint %q: only unix:// endpoints", endpoint)
	}
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	id := csipb.NewIdentityClient(conn)
	var pc *csipb.GetPluginCapabilitiesResponse
	for {
		pc, err = id.GetPluginCapabilities(ctx, &csipb.GetPluginCapabilitiesRequest{}, grpc.WaitForReady(true))
		if err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		return nil, fmt.Errorf("GetPluginCapabilities: %w", err)
	}
	caps := map[string]bool{}
	for _, c := range pc.GetCapabilities() {
		if s := c.GetService(); s != nil {
			caps["plugin:"+s.GetType().String()] = true
		}
		if e := c.GetVolumeExpansion(); e != nil {
			caps["plugin:"+e.GetType().String()] = true
		}
	}
	if caps["plugin:CONTROLLER_SERVICE"] {
		cc, err := csipb.NewControllerClient(conn).ControllerGetCapabilities(ctx, &csipb.ControllerGetCapabilitiesRequest{})
		if err != nil {
			return nil, fmt.Errorf("ControllerGetCapabilities: %w", err)
		}
		for _, c := range cc.GetCapabilities() {
			caps["controller:"+c.GetRpc().GetType().String()] = true
		}
	}
	nc, err := csipb.NewNodeClient(conn).NodeGetCapabilities(ctx, &csipb.NodeGetCapabilitiesRequest{})
	if status.Code(err) == codes.Unimplemented {
		return caps, nil // a controller alone (--mode controller)
	}
	if err != nil {
		return nil, fmt.Errorf("NodeGetCapabilities: %w", err)
	}
	for _, c := range nc.GetCapabilities() {
		caps["node:"+c.GetRpc().GetType().String()] = true
	}
	return caps, nil
}

func sortedWords(caps map[string]bool) []string {
	var ws []string
	for w := range caps {
		ws = append(ws, w)
	}
	sort.Strings(ws)
	return ws
}

var requiresLine = regexp.MustCompile(`^(\s*)([A-Za-z]+):\s*true\s*#\s*requires:\s*(.+?)\s*$`)

// render copies the template to out, turning a "name: true # requires: W..."
// line false when a W is not advertised. It returns one summary line per
// conditional capability.
func render(template, out string, caps map[string]bool) (string, error) {
	in, err := os.ReadFile(template)
	if err != nil {
		return "", err
	}
	var b, report strings.Builder
	sc := bufio.NewScanner(strings.NewReader(string(in)))
	for sc.Scan() {
		line := sc.Text()
		if m := requiresLine.FindStringSubmatch(line); m != nil {
			var missing []string
			for _, w := range strings.Fields(m[3]) {
				if !caps[w] {
					missing = append(missing, w)
				}
			}
			if len(missing) > 0 {
				line = fmt.Sprintf("%s%s: false # not advertised: %s", m[1], m[2], strings.Join(missing, " "))
				fmt.Fprintf(&report, "%-20s off (driver does not advertise %s)\n", m[2], strings.Join(missing, " "))
			} else {
				fmt.Fprintf(&report, "%-20s on\n", m[2])
			}
		}
		b.WriteString(line + "\n")
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return report.String(), os.WriteFile(out, []byte(b.String()), 0o644)
}
