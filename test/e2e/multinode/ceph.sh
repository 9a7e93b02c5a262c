#!/usr/bin/env bash
# ceph.sh up|mount-vm|mount-reader|cli: the multi-node cluster's CephFS, one Ceph cluster
# (mon, mgr, one OSD on BlueStore in a sparse file, one MDS: Debian's packages) that every
# node mounts with a ceph-fuse client of its own.
#
#   up            the daemons in a network namespace of their own (pinned at $CEPH/ns/net),
#                 on our node bridge (node.sh net-up) at $CEPH_IP through the veth fve-ceph;
#                 each daemon in the foreground, recorded (down.sh stops it by PID); then the
#                 filesystem, its snapshots allowed, and one cephx user per node (client.vm,
#                 client.n2, client.n3: rwps, the filesystem with quotas and snapshots),
#                 client.reader (the test's own view of what reached the cluster) and
#                 client.fence (the controller's eviction: mon r, mds *). Waits for
#                 an active MDS and for the data pool's room to be known (a client's statfs
#                 says 0 bytes free until then, and the pool refuses every volume).
#   mount-vm      node vm's client: vm is the host (its kubelet runs in the host's
#                 namespaces), so its ceph-fuse runs there and reaches the cluster over the
#                 bridge's host address; mounted at $CEPH_MNT. Then the pools' directories.
#   mount-reader  client.reader at $CEPH/reader: the stories read an image there, never
#                 through a node.
#   fence-key     print client.fence's key
#   cli ARGS...   the ceph CLI as client.admin
#
# n2 and n3 mount it through `node.sh ceph-client`: their clients run in their own
# namespaces and cgroups, so `node.sh kill` kills a node's client and cutting its veth cuts
# it off the cluster.
#
# Every client runs with fuse_disable_pagecache = true, which filevol requires of a shared
# pool on CephFS (docs/shared-pools-cephfs.md), and puts its admin socket in $CEPH/clients,
# the directory the chart mounts into the shared driver's filevols (values-ceph.yaml:
# sharedPool.cephAdminSocketDir), where they read that setting. The daemons' sockets are
# elsewhere ($CEPH/run): filevol asks every socket of that directory.
#
# Clean-up is down.sh's (every process recorded in $STATE_DIR/pids, the veth stamped, the
# namespace pin and the mounts under the state dir) and clean.sh's ($CEPH, $CEPH_MNT).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../cluster/lib.sh"
[ "$(id -u)" = 0 ] || die "ceph.sh must run as root"
export PATH=$PATH:/usr/local/sbin:/usr/sbin:/sbin

CEPH=$STATE_DIR/ceph
CEPH_IP=${CEPH_IP:-10.89.1.251}
CEPH_LINK=fve-ceph
CEPH_BRIDGE=fve2e-nodes   # node.sh's bridge
CEPH_MNT=$STATE_DIR/cephfs
CONF=$CEPH/ceph.conf
NODE_USERS=(vm n2 n3)
# Each pool's directory in the filesystem (values-ceph.yaml): image volumes, directory volumes.
POOL_DIRS=(images dirs)

cli() { nsenter --net="$CEPH/ns/net" -- ceph -c "$CONF" -n client.admin --connect-timeout 20 "$@"; }

# daemon KIND ID: ceph-KIND in the foreground in the cluster's network namespace, recorded.
# nsenter enters the namespace and execs ceph-KIND: one PID.
daemon() {
  setsid nsenter --net="$CEPH/ns/net" -- "ceph-$1" -f -c "$CONF" -i "$2" \
    > "$CEPH/log/$1.$2.out" 2>&1 < /dev/null 8>&- &
  record_pid "ceph-$1.$2" $!
}

# keyring NAME CAPS...: a keyring entry with a new key and the capabilities given as
# "service=capability" pairs.
keyring() {
  local name=$1 c; shift
  printf '[%s]\n\tkey = %s\n' "$name" "$(ceph-authtool --gen-print-key)"
  for c in "$@"; do printf '\tcaps %s = "%s"\n' "${c%%=*}" "${c#*=}"; done
}

up() {
  local i
  for p in ceph-mon ceph-mgr ceph-osd ceph-mds ceph-fuse ceph ceph-authtool monmaptool; do
    command -v "$p" >/dev/null || die "$p missing (hack/install-deps.sh)"
  done
  ip link show "$CEPH_BRIDGE" >/dev/null 2>&1 || die "no node bridge: node.sh net-up first"
  rm -rf "$CEPH"
  mkdir -p "$CEPH"/{ns,run,clients,log,keys,mon/a,mgr/x,osd/0,mds/a} "$CEPH_MNT"
  server_netns "$CEPH/ns" "$CEPH_LINK" fvp-ceph "$CEPH_IP/24" "$CEPH_BRIDGE"

  local fsid; fsid=$(uuidgen)
  # Single-host needs: pools of size 1 and 8 PGs, no redundancy warnings. Memory kept low
  # (an OSD cache of 512 MiB at most, an MDS cache of 64 MiB, no optional mgr modules).
  # The MDS's beacon every second: an active MDS sooner.
  cat > "$CONF" <<EOF
[global]
fsid = $fsid
mon host = [v2:$CEPH_IP:3300,v1:$CEPH_IP:6789]
public addr = $CEPH_IP
public network = ${CEPH_IP%.*}.0/24
ms bind ipv6 = false
auth cluster required = cephx
auth service required = cephx
auth client required = cephx
auth allow insecure global id reclaim = false
run dir = $CEPH/run
admin socket = $CEPH/run/\$name.asok
log file = $CEPH/log/\$name.log
mon data = $CEPH/mon/\$id
mgr data = $CEPH/mgr/\$id
osd data = $CEPH/osd/\$id
mds data = $CEPH/mds/\$id
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon warn on pool no redundancy = false
mon data avail warn = 2
mon data avail crit = 1
[mon]
mgr initial modules = iostat
[mgr]
mgr standby modules = false
[osd]
osd objectstore = bluestore
bluestore block create = true
bluestore block size = 10737418240
bluestore fsck on mkfs = false
osd memory target = 536870912
osd memory cache min = 67108864
[mds]
mds cache memory limit = 67108864
mds beacon interval = 1
[client]
keyring = $CEPH/keys/\$name.keyring
admin socket = $CEPH/clients/\$name.\$pid.asok
log file = $LOG_DIR/cluster/ceph-\$name.log
fuse disable pagecache = true
EOF
  # Every key made here and imported by the monitor's mkfs: no CLI call per key.
  local node=(mon='allow r' mds='allow rwps' osd='allow rw tag cephfs data=cephfs')
  keyring mon. mon='allow *' > "$CEPH/keys/mon..keyring"
  keyring client.admin mon='allow *' osd='allow *' mds='allow *' mgr='allow *' > "$CEPH/keys/client.admin.keyring"
  keyring mgr.x mon='allow profile mgr' osd='allow *' mds='allow *' > "$CEPH/mgr/x/keyring"
  keyring osd.0 mon='allow profile osd' mgr='allow profile osd' osd='allow *' > "$CEPH/osd/0/keyring"
  keyring mds.a mon='allow profile mds' osd='allow rwx' mds='allow' mgr='allow profile mds' > "$CEPH/mds/a/keyring"
  for u in "${NODE_USERS[@]}" reader; do keyring "client.$u" "${node[@]}" > "$CEPH/keys/client.$u.keyring"; done
  # The shared controller's: what evicts a node's client, and no more (cephevict); run.sh
  # puts it in the controller-publish Secret.
  keyring client.fence mon='allow r' mds='allow *' > "$CEPH/keys/client.fence.keyring"
  cat "$CEPH"/keys/*.keyring "$CEPH"/{mgr/x,osd/0,mds/a}/keyring > "$CEPH/mon.keyring"
  chmod 600 "$CEPH"/keys/*.keyring "$CEPH"/*/*/keyring "$CEPH/mon.keyring"

  monmaptool --create --fsid "$fsid" --addv a "[v2:$CEPH_IP:3300,v1:$CEPH_IP:6789]" "$CEPH/monmap" >/dev/null
  ceph-mon -c "$CONF" --mkfs -i a --monmap "$CEPH/monmap" --keyring "$CEPH/mon.keyring"
  daemon mon a
  for ((i = 0; i < 120; i++)); do cli mon stat >/dev/null 2>&1 && break; sleep 0.5; done
  cli mon stat >/dev/null || die "the monitor did not answer: $(tail -5 "$CEPH/log/mon.a.out" "$CEPH/log/mon.a.log" 2>/dev/null)"
  local uuid; uuid=$(uuidgen)
  [ "$(cli osd new "$uuid")" = 0 ] || die "osd new did not give osd.0"
  # The OSD's BlueStore is made while the mgr, the MDS and the filesystem come up.
  ( nsenter --net="$CEPH/ns/net" -- ceph-osd -c "$CONF" -i 0 --mkfs --osd-uuid "$uuid" > "$CEPH/log/osd-mkfs.out" 2>&1 ) &
  local mkfs=$!
  daemon mgr x
  daemon mds a
  cli osd pool create cephfs_metadata >/dev/null
  cli osd pool create cephfs_data >/dev/null
  cli fs new cephfs cephfs_metadata cephfs_data >/dev/null
  cli fs set cephfs allow_new_snaps true >/dev/null
  wait "$mkfs" || die "ceph-osd --mkfs: $(tail -5 "$CEPH/log/osd-mkfs.out")"
  daemon osd 0
  for ((i = 0; i < 480; i++)); do
    cli fs dump --format json 2>/dev/null | jq -e '[.filesystems[].mdsmap.info[].state] | index("up:active")' >/dev/null && break
    sleep 0.25
  done
  cli fs dump --format json | jq -e '[.filesystems[].mdsmap.info[].state] | index("up:active")' >/dev/null ||
    die "no active MDS: $(tail -5 "$CEPH/log/mds.a.log" 2>/dev/null)"
  # The data pool's room, as the clients' statfs will report it.
  for ((i = 0; i < 600; i++)); do
    [ "$(cli df --format json 2>/dev/null | jq '[.pools[] | select(.name == "cephfs_data") | .stats.max_avail][0] // 0')" -gt 0 ] && break
    sleep 0.5
  done
  log "ceph: cluster $fsid at $CEPH_IP, CephFS cephfs (state $CEPH)"
}

# mount_client USER MOUNTPOINT: ceph-fuse as client.USER in this process's namespaces,
# recorded; waits for the mount.
mount_client() {
  local u=$1 mnt=$2 i
  mountpoint -q "$mnt" && die "$mnt is already a mount point"
  mkdir -p "$mnt"
  setsid ceph-fuse -f -c "$CONF" -n "client.$u" "$mnt" > "$CEPH/log/client.$u.out" 2>&1 < /dev/null 8>&- &
  record_pid "ceph-client-$u" $!
  for ((i = 0; i < 240; i++)); do findmnt -n -t fuse.ceph-fuse "$mnt" >/dev/null && break; sleep 0.25; done
  findmnt -n -t fuse.ceph-fuse "$mnt" >/dev/null || die "client.$u: $mnt not mounted: $(tail -5 "$CEPH/log/client.$u.out")"
}

case ${1:-} in
  up) up ;;
  mount-vm)
    mount_client vm "$CEPH_MNT"
    for d in "${POOL_DIRS[@]}"; do mkdir -p "$CEPH_MNT/$d"; done
    log "ceph: vm mounted cephfs at $CEPH_MNT" ;;
  mount-reader) mount_client reader "$CEPH/reader"; log "ceph: the reader mounted cephfs at $CEPH/reader" ;;
  fence-key) awk '$1 == "key" {print $3}' "$CEPH/keys/client.fence.keyring" ;;
  cli) shift; cli "$@" ;;
  *) sed -n '2,34p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
