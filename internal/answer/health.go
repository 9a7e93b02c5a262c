package answer

import (
	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/filevol/filevol/internal/volume"
)

// What a directory pool (or its node half) notes of a volume, for
// people: SizeNote when its size is not enforced (a pool without quota),
// GuardNote when the pool's quota guard repaired a pod's escape from it;
// "" when there is nothing to say.
type (
	sizeNoter  interface{ SizeNote(id string) string }
	guardNoter interface{ GuardNote(id string) string }
)

// NotedHealth is a DEGRADED entry for each note x has of the volume.
func NotedHealth(x any, id string) []*csipb.VolumeHealth_VolumeHealthEntry {
	var out []*csipb.VolumeHealth_VolumeHealthEntry
	add := func(reason, note string) {
		if note != "" {
			out = append(out, HealthEntry(csipb.VolumeHealthErrorType_DEGRADED, reason, note))
		}
	}
	if n, ok := x.(sizeNoter); ok {
		add(volume.ReasonSizeNotEnforced, n.SizeNote(id))
	}
	if n, ok := x.(guardNoter); ok {
		add(volume.ReasonQuotaEscapeRepaired, n.GuardNote(id))
	}
	return out
}

// HealthEntry is one condition of a volume.
func HealthEntry(t csipb.VolumeHealthErrorType, reason, msg string) *csipb.VolumeHealth_VolumeHealthEntry {
	return &csipb.VolumeHealth_VolumeHealthEntry{Status: t, Reason: reason, Message: msg}
}
