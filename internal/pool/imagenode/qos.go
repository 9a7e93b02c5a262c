package imagenode

import (
	"context"
	"slices"

	"github.com/filevol/filevol/internal/volview"
)

// IOUsers lists the image volume's loop devices and the pods that have it
// published: the UIDs in its targets' paths, by kubelet's layout
// (volview.PodUID). Its staging mount is no pod's.
func (b *Node) IOUsers(ctx context.Context, id string, at ...string) ([]string, []string, error) {
	// The reading ctx carries, what is mounted at the paths, or a reading
	// of its own (reading.go).
	r, err := b.readAt(ctx, at...)
	if err != nil {
		return nil, nil, err
	}
	u, err := r.Usage(b.pool.ImagePath(id))
	if err != nil {
		return nil, nil, err
	}
	var devs, pods []string
	for _, d := range u.Devices {
		devs = append(devs, d.Path)
	}
	_, targets := u.Roles()
	for _, t := range targets {
		if uid := volview.PodUID(t.MountPoint); uid != "" && !slices.Contains(pods, uid) {
			pods = append(pods, uid)
		}
	}
	return devs, pods, nil
}
