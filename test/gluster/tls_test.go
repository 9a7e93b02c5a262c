package gluster_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/filevol/filevol/internal/sharedfs"
	"github.com/filevol/filevol/internal/testutil"
	"github.com/filevol/filevol/internal/testutil/gluster"
	"github.com/filevol/filevol/test/proc"
)

// TestSharedPoolRequireTLS: what filevol reads of a GlusterFS client's
// TLS, on two volumes (SharedPoolSettings), one with TLS on its I/O path
// (the harness's Options.TLS) and one without, each mounted by node-a as
// documented:
//
//   - sharedfs reports transport tls and clear, read from the client
//     translator's transport.socket.ssl-enabled in .meta;
//   - filevol logs the transport at start; with --shared-pool-require=tls
//     it serves the TLS volume's pool and refuses the other's at once,
//     naming the setting found and the fix.
func TestSharedPoolRequireTLS(t *testing.T) {
	bin := proc.BuildDriver(t)
	dir := testutil.Scratch(t, "requiretls")
	for _, tc := range []struct {
		name string
		tls  bool
		want sharedfs.Transport
	}{{"clear", false, sharedfs.TransportClear}, {"tls", true, sharedfs.TransportTLS}} {
		t.Run(tc.name, func(t *testing.T) {
			g := gluster.Start(t, gluster.Options{Set: gluster.SharedPoolSettings, TLS: tc.tls})
			pool := filepath.Join(g.MountNode(t, "node-a", gluster.CoherentClientArgs...), "pool")
			if err := os.MkdirAll(pool, 0o750); err != nil {
				t.Fatal(err)
			}
			r, err := sharedfs.Check(pool)
			if err != nil || r.Transport != tc.want {
				t.Fatalf("Check: transport %q (%s), %v; want %q", r.Transport, r.TransportFrom, err, tc.want)
			}
			t.Logf("%s", r)
			args := []string{"--mode", "all", "--pool-shared", "--pool-name", "gl", "--node-id", "node-a",
				"--kubelet-dir", dir, "--pool-dir", pool}
			p := proc.Start(t, bin, dir, "plain-"+tc.name, args...)
			if !p.LogHas("shared pool filesystem checked", `transport="`+string(tc.want)+`"`) {
				t.Errorf("no transport logged:\n%s", p.LogText())
			}
			p.Stop(t)
			args = append(args, "--shared-pool-require=tls")
			if !tc.tls {
				out := refused(t, bin, dir, args...)
				for _, w := range []string{"--shared-pool-require=tls; not started", "tls: transport.socket.ssl-enabled off in fvgl-client-0 (" + filepath.Dir(pool),
					"gluster volume set fvgl client.ssl on", "gluster volume set fvgl server.ssl on"} {
					if !strings.Contains(out, w) {
						t.Errorf("refusal lacks %q", w)
					}
				}
				return
			}
			p = proc.Start(t, bin, dir, "require-tls", args...)
			if !p.LogHas("shared pool filesystem checked", `transport="tls"`) {
				t.Errorf("no transport logged:\n%s", p.LogText())
			}
			p.Stop(t)
		})
	}
}
