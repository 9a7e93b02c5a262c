package volume

// QoS are a volume's I/O limits, per pod that uses it: operations and
// bytes per second, read and write apart. 0 is "no limit". The pool only
// keeps them; the node enforces them (internal/csi, qos*.go).
type QoS struct {
	ReadIOPS            int64 `json:"readIOPS,omitempty"`
	WriteIOPS           int64 `json:"writeIOPS,omitempty"`
	ReadBytesPerSecond  int64 `json:"readBytesPerSecond,omitempty"`
	WriteBytesPerSecond int64 `json:"writeBytesPerSecond,omitempty"`
}

// Modification is what ControllerModifyVolume changes of a volume.
type Modification struct {
	// QoS are the volume's new I/O limits (zero: none).
	QoS QoS
	// Provisioning is the new provisioning mode; "" keeps the current one.
	Provisioning string
}

// IsZero reports whether q limits nothing.
func (q QoS) IsZero() bool { return q == QoS{} }

// Limits returns the volume's limits (zero when it has none).
func (v Volume) Limits() QoS {
	if v.QoS == nil {
		return QoS{}
	}
	return *v.QoS
}
