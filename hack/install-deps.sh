#!/usr/bin/env bash
# Installs the host programs filevol and its tests need, from Debian's
# packages, only when missing. Idempotent; quiet when all is present.
set -euo pipefail

need=()
have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || [ -x "/sbin/$1" ]; }
have mkfs.ext4  || need+=(e2fsprogs)
have resize2fs  || need+=(e2fsprogs)
have mkfs.xfs   || need+=(xfsprogs)
have xfs_growfs || need+=(xfsprogs)
have mkfs.btrfs || need+=(btrfs-progs)
have blkid      || need+=(util-linux)
have fio        || need+=(fio)
# The GlusterFS test harness (internal/testutil/gluster): a server in a
# network namespace, FUSE clients per simulated node.
have glusterd   || need+=(glusterfs-server)
have gluster    || need+=(glusterfs-server)
have glusterfs  || need+=(glusterfs-client)
have ip         || need+=(iproute2)
have nsenter    || need+=(util-linux)
have unshare    || need+=(util-linux)
# The CephFS test harness (internal/testutil/ceph): a one-host cluster (mon,
# mgr, one OSD, one MDS) in a network namespace, ceph-fuse clients per
# simulated node.
have ceph-mon       || need+=(ceph-mon)
have ceph-mgr       || need+=(ceph-mgr)
have ceph-osd       || need+=(ceph-osd)
have ceph-mds       || need+=(ceph-mds)
have ceph-fuse      || need+=(ceph-fuse)
have ceph           || need+=(ceph-common)
have ceph-authtool  || need+=(ceph-common)
have monmaptool     || need+=(ceph-common)

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages ${need[*]}; run as root to install them" >&2
  exit 1
fi
# De-duplicate and install.
pkgs=$(printf '%s\n' "${need[@]}" | sort -u | tr '\n' ' ')
echo "install-deps: installing $pkgs"
export DEBIAN_FRONTEND=noninteractive
apt-get -o DPkg::Lock::Timeout=300 update -qq
# shellcheck disable=SC2086
apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends $pkgs >/dev/null
