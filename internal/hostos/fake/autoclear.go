package fake

import (
	"fmt"
	"strings"
)

// A loop device detached while something holds it open (the kernel's
// autoclear): Detach refuses a mounted device and marks one a process
// holds (HoldOpen), as filevol's exclusive open does; LosetupDetach is an
// operator's losetup -d, which marks either kind. Holders says what holds
// a device, as loop.Holders does.

// LosetupDetach is what an operator's `losetup -d dev` does: LOOP_CLR_FD
// without the exclusive open that Detach takes first, so a device held
// open, by a process (HoldOpen) or by a mount, is only marked to detach
// at its last close (autoclear: Detaching), and the command exits 0. A
// device nothing holds goes at once.
func (h *Host) LosetupDetach(dev string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if d, err := h.device(dev); err == nil {
		d.Detaching = true
		h.settle()
	}
}

// settle detaches the devices marked Detaching that nothing holds any
// more: the kernel does so at the last close, a Release or the unmount of
// the device's last mount, which the fake sees at its next look.
func (h *Host) settle() {
	for n, d := range h.devices {
		if d.Detaching && d.holders == 0 && !h.fsMounted(d.Device) {
			delete(h.devices, n)
		}
	}
}

// Holders implements hostos.Loops: the device's mounts, and how many
// HoldOpen calls hold it.
func (h *Host) Holders(dev string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	d, err := h.device(dev)
	if err != nil {
		return "nothing this host can see holds it"
	}
	var parts []string
	if ms := h.mountsOf(d.Device); len(ms) > 0 {
		at := make([]string, 0, len(ms))
		for _, m := range ms {
			at = append(at, m.MountPoint)
		}
		parts = append(parts, "mounted at "+strings.Join(at, ", "))
	}
	if d.holders > 0 {
		parts = append(parts, fmt.Sprintf("open by %d process(es) (HoldOpen)", d.holders))
	}
	if len(parts) == 0 {
		return "nothing this host can see holds it"
	}
	return strings.Join(parts, "; ")
}
