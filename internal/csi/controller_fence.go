package csi

import (
	"fmt"
	"strings"

	"github.com/filevol/filevol/internal/inuse"
)

// fenceDetail says, for fence's refusal, what the pool's in-use records
// tell of the holder's device, which the controller cannot look at
// itself: the holding node records the loop device it staged the volume
// through, and a detach of it that waits because the device is still
// open, with what holds it (internal/csi/node_devices.go). holder is the
// node the refusal names ("" when it names none: then every node but
// node, the one asking). It is "" when no record says anything, or when
// the records cannot be read (the refusal stands without it).
func fenceDetail(st *poolStore, volumeID, holder, node string) string {
	es, err := st.inuse.Of(volumeID)
	if err != nil {
		return ""
	}
	var out []string
	for _, e := range es {
		if holder != "" && e.Node != holder || holder == "" && e.Node == node {
			continue
		}
		if d := deviceDetail(e); d != "" {
			out = append(out, d)
		}
	}
	if len(out) == 0 {
		return ""
	}
	return "; " + strings.Join(out, "; ")
}

// deviceDetail is fenceDetail's sentence for one node's record.
func deviceDetail(e inuse.Entry) string {
	if p := e.Pending; p != nil {
		return fmt.Sprintf("node %[1]s's loop device %[2]s is detached but its detach is pending, because the device is still held: %[3]s (seen by filevol on node %[1]s at %[4]s); "+
			"the kernel lets go of the device, and of the image, only at its last close, so losetup -d again changes nothing: "+
			"end those holders on node %[1]s (the pod that still uses the volume there, a mount, a process)",
			e.Node, p.Device, p.Holders, p.Seen.Format("2006-01-02T15:04:05Z07:00"))
	}
	if e.Device == "" {
		return ""
	}
	return fmt.Sprintf("node %[1]s staged it through its loop device %[2]s: if that device was detached there and still exists (losetup -l on node %[1]s shows it with AUTOCLEAR 1), "+
		"its detach waits for whatever still holds it open: find that on node %[1]s with findmnt -S %[2]s (its mounts), fuser -vm %[2]s or lsof %[2]s (processes), "+
		"and end it (the pod that still uses the volume there, a mount, a process)", e.Node, e.Device)
}
