package csi

import (
	"slices"
	"strconv"
	"strings"

	"github.com/filevol/filevol/internal/options"
	"github.com/filevol/filevol/internal/volume"
)

// I/O limit parameters, accepted in a StorageClass (CreateVolume's
// parameters) and in a VolumeAttributesClass (CreateVolume's and
// ControllerModifyVolume's mutable_parameters). The EBS driver names its
// single knobs "iops" and "throughput" (MiB/s); filevol limits reads and
// writes apart, per pod, so it spells the direction and the unit out.
// "0" means no limit.
const (
	// ParamReadIOPS: read operations per second.
	ParamReadIOPS = "readIOPS"
	// ParamWriteIOPS: write operations per second.
	ParamWriteIOPS = "writeIOPS"
	// ParamReadBytesPerSecond: bytes read per second; a plain number or
	// a binary or decimal quantity ("10Mi", "500k" is not one: "500K").
	ParamReadBytesPerSecond = "readBytesPerSecond"
	// ParamWriteBytesPerSecond: bytes written per second, as above.
	ParamWriteBytesPerSecond = "writeBytesPerSecond"
)

// qosParams lists the mutable parameters, in the order messages list them.
// zeroQoS limits nothing.
var zeroQoS volume.QoS

var qosParams = []string{ParamReadIOPS, ParamWriteIOPS, ParamReadBytesPerSecond, ParamWriteBytesPerSecond}

// isQoSParam reports whether k is one of the I/O limit parameters.
func isQoSParam(k string) bool { return slices.Contains(qosParams, k) }

// maxLimit bounds a limit: cgroup v1 takes a u64, but nothing sensible is
// near it, and a bound keeps the arithmetic far from overflow.
const maxLimit = 1 << 50

// setQoSParam applies the parameter k=v to q; k must be a QoS parameter.
func setQoSParam(q *volume.QoS, k, v string) error {
	var (
		n   int64
		err error
	)
	if k == ParamReadIOPS || k == ParamWriteIOPS {
		n, err = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	} else {
		var qt options.Quantity
		qt, err = options.ParseQuantity(strings.TrimSpace(v))
		n = int64(qt)
	}
	if err != nil || n < 0 || n > maxLimit {
		return invalidArgument("parameter %s=%q: want a whole number from 0 (no limit) to %d", k, truncate(v), int64(maxLimit))
	}
	switch k {
	case ParamReadIOPS:
		q.ReadIOPS = n
	case ParamWriteIOPS:
		q.WriteIOPS = n
	case ParamReadBytesPerSecond:
		q.ReadBytesPerSecond = n
	case ParamWriteBytesPerSecond:
		q.WriteBytesPerSecond = n
	}
	return nil
}

// parseMutable applies a VolumeAttributesClass's parameters to the limits
// q. The limits and provisioning can change while a volume exists: a
// parameter that is fixed at create (fstype, the PV/PVC metadata) is
// INVALID_ARGUMENT naming it, and so is one filevol does not know.
// Parameters the class does not name keep their value (as EBS's
// ModifyVolume leaves what it is not asked to change); "0" removes a
// limit. The Modification's Provisioning is "" when not asked for.
func parseMutable(q volume.QoS, params map[string]string) (volume.Modification, error) {
	m, err := parseMutableInto(&q, params)
	m.QoS = q
	return m, err
}

func parseMutableInto(q *volume.QoS, params map[string]string) (volume.Modification, error) {
	var m volume.Modification
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	slices.Sort(keys) // the first bad parameter named is always the same one
	for _, k := range keys {
		switch {
		case isQoSParam(k):
			if err := setQoSParam(q, k, params[k]); err != nil {
				return m, err
			}
		case k == ParamProvisioning:
			if v := params[k]; v != volume.ProvisioningThin && v != volume.ProvisioningThick {
				return m, invalidArgument("parameter %s=%q: must be thin or thick", k, truncate(v))
			}
			m.Provisioning = params[k]
		case k == ParamFSType, strings.HasPrefix(k, kubernetesMetaPrefix):
			return m, invalidArgument("parameter %q cannot be modified: it is fixed when the volume is created (mutable: %s, %s)",
				truncate(k), strings.Join(qosParams, ", "), ParamProvisioning)
		default:
			return m, invalidArgument("unknown mutable parameter %q (filevol accepts %s, %s)", truncate(k), strings.Join(qosParams, ", "), ParamProvisioning)
		}
	}
	return m, nil
}
