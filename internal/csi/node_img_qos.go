package csi

import (
	"slices"

	"github.com/filevol/filevol/internal/volview"
)

// IOUsers lists the image volume's loop devices and the pods that have it
// published: the UIDs in its targets' paths, by kubelet's layout
// (volview.PodUID). Its staging mount is no pod's.
func (b *imageNode) IOUsers(id string) ([]string, []string, error) {
	u, err := volumeUsage(b.host, b.pool.ImagePath(id))
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
