package wire

import (
	"bytes"
	"testing"
)

// records parses a TLS 1.3 connection's start, refuses GlusterFS's clear
// RPC (a record mark with the high bit set) at its first byte, and stops
// at the first header that is not a TLS record's.
func TestRecords(t *testing.T) {
	rec := func(typ byte, n int) []byte {
		return append([]byte{typ, 3, 3, byte(n >> 8), byte(n)}, bytes.Repeat([]byte{0xaa}, n)...)
	}
	hello := append([]byte{22, 3, 1, 0, 4}, 1, 0, 0, 0)
	tlsStream := bytes.Join([][]byte{hello, rec(20, 1), rec(23, 100), rec(23, 16384), rec(23, 10)[:7]}, nil)
	r := records(Flow{}, tlsStream)
	if !r.IsTLS() || r.ByType[22] != 1 || r.ByType[23] != 3 || r.AppData != 16494 {
		t.Errorf("TLS stream: %v (%v)", r, r.ByType)
	}
	rpc := []byte{0x80, 0, 0, 0x44, 0, 0, 0, 1}
	if r := records(Flow{}, rpc); r.IsTLS() || r.BadAt != 0 {
		t.Errorf("clear RPC: %v", r)
	}
	bad := append(rec(23, 5), 0x17, 3, 3, 0x50, 0)
	if r := records(Flow{}, bad); r.IsTLS() || r.BadAt != 10 {
		t.Errorf("overlong record: %v", r)
	}
	if r := records(Flow{}, hello); r.IsTLS() {
		t.Errorf("a handshake alone counts as TLS with data: %v", r)
	}
}

// Contains finds a text in the flow that carried it, across the
// boundary of two segments of that flow.
func TestContains(t *testing.T) {
	a, b := Flow{Src: "10.0.0.1", SrcPort: 1, Dst: "10.0.0.2", DstPort: 2}, Flow{Src: "10.0.0.2", SrcPort: 2, Dst: "10.0.0.1", DstPort: 1}
	r := Result{Streams: map[Flow][]byte{a: []byte("xxfvwi"), b: []byte("nothing")}}
	r.Streams[a] = append(r.Streams[a], []byte("re-123yy")...)
	if got := r.Contains([]byte("fvwire-123")); len(got) != 1 || got[0] != a {
		t.Errorf("Contains: %v", got)
	}
	if got := r.Contains([]byte("absent")); len(got) != 0 {
		t.Errorf("Contains absent: %v", got)
	}
}
