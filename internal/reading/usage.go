package reading

import (
	"fmt"

	"github.com/filevol/filevol/internal/hostos"
	"github.com/filevol/filevol/internal/volview"
)

// ImageUsage asks the kernel where the image at imagePath is in use, for
// one volume alone; what the devices and mounts mean is volview's to say.
func ImageUsage(h hostos.Host, imagePath string) (volview.Usage, error) {
	devs, err := h.Loops.Find(imagePath)
	if err != nil {
		return volview.Usage{}, fmt.Errorf("look up loop devices of %s: %w", imagePath, err)
	}
	if len(devs) == 0 {
		return volview.Usage{}, nil
	}
	table, err := h.Mounts.Table()
	if err != nil {
		return volview.Usage{Devices: devs}, fmt.Errorf("read mount table: %w", err)
	}
	return volview.Of(devs, table), nil
}
