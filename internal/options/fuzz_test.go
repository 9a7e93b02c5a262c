package options

import (
	"strings"
	"testing"
)

func FuzzParseQuantity(f *testing.F) {
	for _, s := range []string{"1Gi", "500M", "0", "-1", "9223372036854775807Ki", "1.5Gi", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q, err := ParseQuantity(s)
		if err == nil && q < 0 {
			t.Fatalf("%q parsed to negative %d", s, q)
		}
	})
}

func FuzzParseEndpoint(f *testing.F) {
	for _, s := range []string{"unix:///run/csi.sock", "tcp://127.0.0.1:10000", "tcp://0.0.0.0:1", "http://x", "unix://"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		network, addr, err := ParseEndpoint(s)
		if err != nil {
			return
		}
		switch network {
		case "unix":
			if addr == "" {
				t.Fatalf("%q: empty socket path", s)
			}
		case "tcp":
			if !strings.HasPrefix(addr, "127.0.0.1:") && !strings.HasPrefix(addr, "localhost:") && !strings.HasPrefix(addr, "[::1]:") {
				t.Fatalf("%q: tcp endpoint %q not on loopback", s, addr)
			}
		default:
			t.Fatalf("%q: network %q", s, network)
		}
	})
}
