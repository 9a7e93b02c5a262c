#!/usr/bin/env bash
# Install the Debian packages the e2e cluster needs, only when missing.
# Idempotent and quiet: a second run does nothing (no apt-get update either).
set -euo pipefail

PKGS=(
  containerd                  # CRI runtime (1.6.x on bookworm)
  runc                        # OCI runtime used by containerd
  containernetworking-plugins # bridge/host-local/loopback CNI plugins in /usr/lib/cni
  busybox-static              # rootfs of the local busybox/agnhost images
  conntrack iptables socat ethtool # kubelet host utilities
  gcc libc6-dev               # static pause binary (build/pause/linux/pause.c)
  openssl jq curl bc          # PKI, scripts
  util-linux mount iproute2   # losetup, mountpoint, nsenter, ip
  openssh-server openssh-client # the node's sshd for the upstream [Disruptive] tests (up.sh)
  # The multi-node cluster's shared pools (test/e2e/multinode): GlusterFS (gluster.sh) and
  # a one-host Ceph with its CephFS (ceph.sh), each node's client too.
  glusterfs-server glusterfs-client
  ceph-mon ceph-mgr ceph-osd ceph-mds ceph-fuse ceph-common
)

if [ "$(id -u)" != 0 ]; then
  echo "install-packages.sh: must run as root" >&2
  exit 1
fi

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install-packages: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# Packages with a service (openssh-server) must not start it: up.sh runs its own sshd on
# the node's address only. policy-rc.d says no to invoke-rc.d while we install; one that
# is already there is left as it is.
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\n# install-packages.sh (filevol e2e): start no service while it installs\nexit 101\n' > /usr/sbin/policy-rc.d
  chmod 755 /usr/sbin/policy-rc.d
  trap 'rm -f /usr/sbin/policy-rc.d' EXIT
fi
apt-get -o DPkg::Lock::Timeout=300 update -qq >/dev/null
apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-packages: done"
