package wire

import (
	"encoding/binary"
	"fmt"
)

// TLS record content types (RFC 8446 §5.1; 20-23 in every TLS version).
const (
	recChangeCipherSpec = 20
	recAlert            = 21
	recHandshake        = 22
	recApplicationData  = 23
)

// Records is what a flow's payload parsed as: TLS records, from the
// first byte of the connection to the last whole record.
type Records struct {
	Flow Flow
	// ByType counts records per content type (22 handshake, 23
	// application data...).
	ByType map[byte]int
	// AppData counts the bytes inside application-data records.
	AppData int
	// BadAt is the offset where the payload stopped parsing as TLS
	// records (a header with an unknown type, version or a length over
	// 2^14+256), -1 when all of it parsed: in clear, GlusterFS's RPC
	// starts with a 4-byte record mark (high bit set), which fails at 0.
	BadAt int
	// Bytes is the flow's payload length.
	Bytes int
}

// IsTLS reports whether every byte parsed as TLS records and application
// data was among them.
func (r Records) IsTLS() bool { return r.BadAt < 0 && r.ByType[recApplicationData] > 0 }

func (r Records) String() string {
	return fmt.Sprintf("%v: %d bytes, %d handshake, %d application-data records (%d bytes), bad at %d",
		r.Flow, r.Bytes, r.ByType[recHandshake], r.ByType[recApplicationData], r.AppData, r.BadAt)
}

// TLS parses, as TLS records, every flow to or from port that carried a
// payload. It needs the capture to have started before the connections
// did (a stream joined midway does not start at a record).
func (r Result) TLS(port uint16) []Records {
	var out []Records
	for f, b := range r.Streams {
		if f.SrcPort == port || f.DstPort == port {
			out = append(out, records(f, b))
		}
	}
	return out
}

// records walks b as a sequence of TLS record headers (type, version,
// length) and bodies. A record cut by the capture's end is not an error.
func records(f Flow, b []byte) Records {
	r := Records{Flow: f, ByType: map[byte]int{}, BadAt: -1, Bytes: len(b)}
	for off := 0; off+5 <= len(b); {
		typ, major, length := b[off], b[off+1], int(binary.BigEndian.Uint16(b[off+3:off+5]))
		if typ < recChangeCipherSpec || typ > recApplicationData || major != 3 || b[off+2] > 4 || length > 1<<14+256 {
			r.BadAt = off
			return r
		}
		r.ByType[typ]++
		if typ == recApplicationData {
			r.AppData += length
		}
		off += 5 + length
	}
	return r
}
