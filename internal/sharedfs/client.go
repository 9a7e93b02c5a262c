package sharedfs

import (
	"fmt"
	"strings"

	"github.com/filevol/filevol/internal/volume"
)

// ClientOf reads the client serving dir on a filesystem of kind (the
// Kind Check reported), where the filesystem's cluster names its clients
// and one with the cluster's credentials can cut a client off: on CephFS
// the ceph-fuse client's ceph.client_id and ceph.cluster_fsid. A node
// records it with each volume it stages, so that a controller can evict
// a node that is gone (docs/shared-pools-cephfs.md). ok is false on every
// other kind (local, GlusterFS, other), which record nothing. It reads
// two extended attributes and asks nobody.
func ClientOf(kind Kind, dir string) (c volume.StorageClient, ok bool, err error) {
	if kind != KindCephFS {
		return volume.StorageClient{}, false, nil
	}
	id, fsid, err := cephClient(realCephEnv(nil), dir)
	if err != nil {
		return volume.StorageClient{}, false, err
	}
	return volume.StorageClient{Kind: string(kind), ID: id, Cluster: fsid}, true, nil
}

// CephMonitors is the monitors' addresses (mon_host) of the ceph-fuse
// client serving dir, as that client runs with them, read from its admin
// socket (found as Check finds it, in o.CephSocketDirs), and its
// cluster's fsid: where a program of this host reaches the cluster the
// pool is on.
func CephMonitors(dir string, o Options) (monitors, fsid string, err error) {
	dirs := o.CephSocketDirs
	if len(dirs) == 0 {
		dirs = DefaultCephSocketDirs
	}
	e := realCephEnv(dirs)
	_, fsid, err = cephClient(e, dir)
	if err != nil {
		return "", "", err
	}
	mons, _, err := cephSetting(e, dir, "mon_host")
	if err != nil {
		return "", "", err
	}
	if strings.TrimSpace(mons) == "" {
		return "", "", fmt.Errorf("the ceph-fuse client of %s runs with no mon_host", dir)
	}
	return mons, fsid, nil
}
