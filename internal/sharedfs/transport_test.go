package sharedfs

import (
	"strings"
	"testing"
	"testing/fstest"
)

// volfile-tls is the .meta volfile of a GlusterFS 10.3 client of the
// harness's volume with Options.TLS (client.ssl, server.ssl on and the
// ssl.own-cert, ssl.private-key, ssl.ca-list options); volfile-default
// shows transport.socket.ssl-enabled off.
func TestGlusterTransport(t *testing.T) {
	cases := []struct {
		name    string
		volfile []byte
		want    Transport
		from    string
	}{
		{"tls", fixture(t, "volfile-tls"), TransportTLS, "transport.socket.ssl-enabled on in fvgl-client-0 (/mnt/shared/.meta/graphs/active/volfile)"},
		{"default", fixture(t, "volfile-default"), TransportClear, "transport.socket.ssl-enabled off in fvgl-client-0"},
		{"option absent", []byte("volume v-client-0\n type protocol/client\nend-volume\n"), TransportClear, "off in v-client-0"},
		{"one brick of two in clear", []byte("volume v-client-0\n type protocol/client\n option transport.socket.ssl-enabled on\nend-volume\n" +
			"volume v-client-1\n type protocol/client\n option transport.socket.ssl-enabled off\nend-volume\n"), TransportClear, "off in v-client-1 ("},
		{"no client translator", []byte("volume meta\n type meta\nend-volume\n"), TransportUnknown, "holds no client translator"},
		{"unparsable", []byte("end-volume\n"), TransportUnknown, "end-volume outside a volume"},
	}
	for _, c := range cases {
		got, from := glusterTransport(fstest.MapFS{metaVolfile: {Data: c.volfile}}, "/mnt/shared")
		if got != c.want || !strings.Contains(from, c.from) {
			t.Errorf("%s: %q (%s), want %q (%s)", c.name, got, from, c.want, c.from)
		}
	}
	if got, from := glusterTransport(nil, "/mnt/shared"); got != TransportUnknown || !strings.Contains(from, "not reachable") {
		t.Errorf("no fs: %q (%s)", got, from)
	}
}

// The refusal of --shared-pool-require=tls names what was read and the
// fix, per kind; a TLS client is not refused.
func TestTLSUnmet(t *testing.T) {
	if u := TLSUnmet(Report{Kind: KindGlusterFS, Transport: TransportTLS}); u != nil {
		t.Errorf("tls refused: %v", u.Describe())
	}
	u := TLSUnmet(Report{Kind: KindGlusterFS, Volume: "vol", Transport: TransportClear, TransportFrom: "transport.socket.ssl-enabled off in vol-client-0 (x)"})
	for _, w := range []string{"tls: transport.socket.ssl-enabled off in vol-client-0 (x), want TLS", "gluster volume set vol client.ssl on",
		"gluster volume set vol server.ssl on", "auth.ssl-allow", "remount"} {
		if u == nil || !strings.Contains(u.Describe(), w) {
			t.Errorf("clear: lacks %q: %v", w, u)
		}
	}
	for _, k := range []Kind{KindLocal, KindCephFS, KindOther} {
		u := TLSUnmet(Report{Kind: k})
		if u == nil || !strings.Contains(u.Describe(), "a "+string(k)+" filesystem, whose client shows filevol nothing") ||
			!strings.Contains(u.Describe(), "drop --shared-pool-require=tls") {
			t.Errorf("%s: %v", k, u)
		}
	}
}
