#!/usr/bin/env bash
# clean.sh: everything a run of run.sh (make e2e-multinode) made, gone: down.sh (the nodes
# with their namespaces, mounts and loop devices, the GlusterFS server and clients, the
# Ceph daemons and clients, the control plane, the stamped links and cgroups), then the
# directories only this run makes under the state dir: vm's pool, the GlusterFS state and
# brick, the shared pool's mount point, the directory where filevol installed its
# GlusterFS client's TLS files, the directory pool's btrfs and its file, the Ceph
# cluster's state (its OSD's data included) and the CephFS's mount point. run.sh runs it before it brings a cluster
# up (after a killed run: FILEVOL_E2E_GRACEFUL=0, nothing to be graceful with) and at its
# end; killed-run.sh proves it leaves nothing. The caller holds $STATE_DIR/run.lock.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../cluster/lib.sh"
[ "$(id -u)" = 0 ] || die "clean.sh must run as root"
"$CLUSTER_DIR/down.sh"
for d in pool gluster shared-pool shared-pool-tls dir-pool ceph cephfs; do
  # down.sh unmounted whatever was mounted there; --one-file-system: never through a mount
  # that somehow is still there.
  [ -d "$STATE_DIR/$d" ] && rm -rf --one-file-system "${STATE_DIR:?}/$d"
done
rm -f "$STATE_DIR/dir-pool.img"
rm -f "$STATE_DIR/shared-controller"   # run.sh's symlink to a shared controller's socket directory
