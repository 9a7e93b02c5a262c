package pool

import "fmt"

// QoS are a volume's I/O limits, per pod that uses it: operations and
// bytes per second, read and write apart. 0 is "no limit". The pool only
// keeps them; the node enforces them (internal/csi, qos*.go).
type QoS struct {
	ReadIOPS            int64 `json:"readIOPS,omitempty"`
	WriteIOPS           int64 `json:"writeIOPS,omitempty"`
	ReadBytesPerSecond  int64 `json:"readBytesPerSecond,omitempty"`
	WriteBytesPerSecond int64 `json:"writeBytesPerSecond,omitempty"`
}

// IsZero reports whether q limits nothing.
func (q QoS) IsZero() bool { return q == QoS{} }

// normal is the form a record keeps: nil for no limits, so that records
// of unlimited volumes stay as they were before limits existed.
func (q *QoS) normal() *QoS {
	if q == nil || q.IsZero() {
		return nil
	}
	c := *q
	return &c
}

// Limits returns the volume's limits (zero when it has none).
func (v Volume) Limits() QoS {
	if v.QoS == nil {
		return QoS{}
	}
	return *v.QoS
}

// SetQoS records the volume's new I/O limits atomically and returns its
// record. The same limits are success with no write (idempotent); a zero
// q removes every limit. The caller holds the volume's lock.
func (p *Pool) SetQoS(id string, q QoS) (Volume, error) {
	v, err := p.get(id)
	if err != nil {
		return Volume{}, err
	}
	for _, n := range []int64{q.ReadIOPS, q.WriteIOPS, q.ReadBytesPerSecond, q.WriteBytesPerSecond} {
		if n < 0 {
			return Volume{}, fmt.Errorf("%w: negative I/O limit %d", ErrInvalidArgument, n)
		}
	}
	if v.Limits() == q {
		return v, nil
	}
	v.QoS = q.normal()
	if err := p.vols.Replace(v); err != nil {
		return Volume{}, fmt.Errorf("set I/O limits of volume %s: %w", id, err)
	}
	return v, nil
}
