#!/usr/bin/env bash
# node.sh up|down|kill|revive|exec NAME [ARGS]: an extra Kubernetes node on this machine,
# beside the node `vm` of up.sh (which must be up). README.md, "Extra nodes", says why
# each piece is as it is; in short, node NAME (n2, n3) is:
#
#   - a holder process (`sleep infinity`) in new mount, network and UTS namespaces,
#     pinned as bind mounts $ND/ns/{mnt,net,uts} ($ND = $STATE_DIR/nodes/NAME), so that
#     every later process of the node joins them with nsenter;
#   - in that mount namespace, its own /var/lib/kubelet, /run/containerd,
#     /var/lib/containerd, /var/lib/cni, /var/log/containers and the filevol pools,
#     bind-mounted from $ND; every mount copied from the host when the namespace was
#     made (other tests' loop-device filesystems, FUSE mounts, namespace pins) is
#     detached first, so the node never pins what is not its own;
#   - a veth pair: fve-NAME on our bridge fve2e-nodes (host address $MN_HOST_IP), eth0
#     with the node IP inside; no route beyond the bridge;
#   - in its cgroup /filevol-e2e-NAME (every hierarchy): sys/ holds its containerd (and
#     so the shims), kubelet and apiserver forwarder; kubepods/ is its kubelet's;
#   - a forwarder (socat) on 127.0.0.1:6443 in its network namespace to $MN_HOST_IP:6443,
#     where a host forwarder (recorded by `node.sh net-up`) reaches the apiserver on
#     127.0.0.1: kubeconfigs and hostNetwork pods use 127.0.0.1:6443 on every node.
#
#   up NAME IP ZONE [POOL_MIB]   make and start the node; POOL_MIB > 0 puts a tmpfs of that
#                                size on its pool directory (different pool sizes)
#   kill NAME      cut its network (the host side of its veth goes down), then SIGKILL its
#                  kubelet, containerd, forwarder, shims and containers; its namespaces,
#                  mounts and loop devices stay, as a powered-off disk would keep its data
#   revive NAME    network up, containerd, forwarder and kubelet started again
#   down NAME      everything of the node gone: processes, mounts, namespaces, loop devices
#                  backed by its files, veth, cgroups, its state directory
#   net-up         the bridge and the host forwarder (before the first node)
#   net-down       the host forwarder and the bridge (after the last node)
#   exec NAME CMD...  run CMD inside the node's namespaces
#   pool-client NAME SERVER VOLUME MOUNTPOINT [WAIT_FILE]  mount the GlusterFS volume
#                  SERVER:VOLUME at MOUNTPOINT in the node's namespaces, by a client that is
#                  one of the node's processes (killed by `kill`, started again by
#                  `revive`); with WAIT_FILE, once that file is there in the node's view
#   ceph-client NAME CONF MOUNTPOINT  mount the CephFS of ceph.conf CONF at MOUNTPOINT in the
#                  node's namespaces, as cephx user client.NAME, by a ceph-fuse that is one
#                  of the node's processes (killed by `kill`, started again by `revive`)
#   names          the nodes that have a state directory
#   mount NAME SOURCE MOUNTPOINT TYPE  mount SOURCE in the node's mount namespace (a
#                  filesystem the host has mounted too: the same superblock, one kernel)
#   ctr NAME ARGS...  the node's containerd's ctr
#   kubelet stop|start|is-active NAME  the node's kubelet alone, as systemd would drive it
#                  (its containers, containerd, storage client and network stay): what
#                  node-bin/systemctl calls for the upstream [Disruptive] tests, which ssh
#                  to the node's sshd (see start_sshd), and the fencing story
#
# Every process is recorded in $STATE_DIR/pids (record_pid), so that the guard of up.sh and
# down.sh counts it as ours; everything else is stamped in $STATE_DIR/owned before it is
# made (`node NAME`, `link`, `cgroup`), and down.sh calls `node.sh down` for each node.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[ "$(id -u)" = 0 ] || die "node.sh must run as root"
export PATH=$PATH:/usr/local/sbin:/usr/sbin:/sbin

MN_BRIDGE=fve2e-nodes
MN_HOST_IP=10.89.1.1
MN_PREFIX=24
NODES_DIR=$STATE_DIR/nodes
P=$STATE_DIR/pki
# The pool path every node's filevol uses (values-multinode.yaml: pool.hostPath); on each
# extra node it is that node's own directory, bind-mounted in its mount namespace.
MN_POOL=$STATE_DIR/pool

nd() { echo "$NODES_DIR/$1"; }
valid_name() { [[ $1 =~ ^n[0-9]$ ]] || die "node name '$1': want n2..n9"; }
nsx() { # NAME CMD...: run CMD in the node's namespaces
  local d; d=$(nd "$1"); shift
  nsenter --mount="$d/ns/mnt" --net="$d/ns/net" --uts="$d/ns/uts" -- "$@"
}
# hierarchies: every cgroup hierarchy's mount point.
hierarchies() {
  awk -v fs="$CGROUP_FS" '($9 == "cgroup" || $9 == "cgroup2") && ($5 == fs || index($5, fs "/") == 1) {print $5}' /proc/self/mountinfo | sort -u
}
# mkcg DIR: a cgroup in every hierarchy (cpuset: a new v1 cgroup starts without CPUs).
mkcg() {
  local h f c
  while read -r h; do
    c=$h
    for part in ${1//\// }; do
      c=$c/$part
      mkdir -p "$c"
      for f in cpuset.cpus cpuset.mems; do
        if [ -e "$c/$f" ] && [ -z "$(cat "$c/$f")" ]; then cat "$(dirname "$c")/$f" > "$c/$f"; fi
      done
    done
  done < <(hierarchies)
}
# cg_procs DIR: every process in DIR and below, any hierarchy.
cg_procs() {
  local h
  while read -r h; do
    [ -d "$h/$1" ] && find "$h/$1" -name cgroup.procs -exec cat {} + 2>/dev/null
  done < <(hierarchies) | sort -un
}

# start NAME WHAT CMD...: CMD in the node's namespaces and its cgroup sys/, its own session,
# logging to $LOGS/NAME/WHAT.log, recorded as NAME/WHAT.
start() {
  local n=$1 w=$2 d p ns; shift 2; d=$(nd "$n")
  # --net-only: the node's network namespace, the host's mount and UTS ones (start_sshd).
  ns=(--mount="$d/ns/mnt" --net="$d/ns/net" --uts="$d/ns/uts")
  if [ "$1" = --net-only ]; then ns=(--net="$d/ns/net"); shift; fi
  mkdir -p "$LOG_DIR/cluster/$n"
  # The shell puts itself in the cgroup, then becomes nsenter, which becomes CMD: one PID.
  setsid bash -c 'for h in $(awk '\''$9 ~ /^cgroup2?$/ {print $5}'\'' /proc/self/mountinfo); do
      [ -d "$h/$0" ] && echo $$ > "$h/$0/cgroup.procs"; done
      exec nsenter "${@:2:$1}" -- "${@:$(($1 + 2))}"' \
    "filevol-e2e-$n/sys" "${#ns[@]}" "${ns[@]}" "$@" >> "$LOG_DIR/cluster/$n/$w.log" 2>&1 < /dev/null 8>&- &
  p=$!
  record_pid "$n/$w" "$p"
  log "$n: started $w (pid $p)"
}

# start_sshd NAME: the node's sshd on its IP, port 22, for the upstream [Disruptive] tests
# (they ssh to the pod's node to stop its kubelet and look at its mounts): up.sh's key
# pair and host key, a ForceCommand (node-ssh.sh) that runs the command in the node's
# mount and UTS namespaces. The sshd itself is in the node's network namespace only:
# node-ssh.sh enters the node's mount namespace through the pins, which are host mounts.
# In the node's cgroup: `kill` kills it with the node, `revive` starts it again.
start_sshd() {
  local n=$1 d; d=$(nd "$n")
  [ -s "$d/ssh/sshd_config" ] || return 0
  start "$n" sshd --net-only "$(command -v sshd)" -D -e -f "$d/ssh/sshd_config"
}
# ssh_config NAME IP: the node's sshd_config and session environment (up.sh's, plus the
# node's name), when up.sh made the keys.
ssh_config() {
  local n=$1 ip=$2 d S=$STATE_DIR/ssh; d=$(nd "$n")
  [ -s "$S/env" ] && [ -s "$S/sshd_config" ] || return 0
  mkdir -p "$d/ssh"; chmod 700 "$d/ssh"
  { cat "$S/env"; printf 'export FILEVOL_E2E_NODE=%q\n' "$n"; } > "$d/ssh/env"
  sed -e "s#^ListenAddress .*#ListenAddress $ip:22#" -e "s#^ForceCommand .*#ForceCommand $CLUSTER_DIR/node-ssh.sh $d/ssh/env#" \
    "$S/sshd_config" > "$d/ssh/sshd_config"
}

net_up() {
  if ! ip link show "$MN_BRIDGE" >/dev/null 2>&1; then
    own link "$MN_BRIDGE"
    ip link add "$MN_BRIDGE" type bridge
    ip addr add "$MN_HOST_IP/$MN_PREFIX" dev "$MN_BRIDGE"
    ip link set "$MN_BRIDGE" up
  fi
  if ! awk '$1 == "fwd-host"' "$PIDS_FILE" 2>/dev/null | grep -q .; then
    mkdir -p "$LOG_DIR/cluster"
    # The apiserver listens on 127.0.0.1 only: the nodes reach it through this.
    setsid socat TCP-LISTEN:6443,bind=$MN_HOST_IP,reuseaddr,fork TCP:127.0.0.1:6443 \
      >> "$LOG_DIR/cluster/fwd-host.log" 2>&1 < /dev/null 8>&- &
    record_pid fwd-host $!
  fi
}

# node_pki NAME IP: the node's kubelet serving and client certificates, from the cluster CA.
node_pki() {
  local n=$1 ip=$2 d; d=$(nd "$n")/pki
  mkdir -p "$d"
  (
    cd "$d"; umask 077
    x() { printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=%s\n%s\n' "$1" "${2:+subjectAltName=$2}"; }
    c() {
      openssl genrsa -out "$1.key" 2048 2>/dev/null
      openssl req -new -key "$1.key" -subj "$2" -out "$1.csr" 2>/dev/null
      openssl x509 -req -in "$1.csr" -CA "$P/ca.crt" -CAkey "$P/ca.key" -CAcreateserial -CAserial "$d/ca.srl" \
        -days 30 -extfile <(x "$3" "${4:-}") -out "$1.crt" 2>/dev/null
      rm -f "$1.csr"
    }
    c kubelet "/CN=$n" serverAuth "IP:$ip,DNS:$n"
    c kubelet-client "/CN=system:node:$n/O=system:nodes" clientAuth
  )
  local f=$(nd "$n")/kubelet.kubeconfig
  "$KUBECTL" config set-cluster local --server=https://127.0.0.1:6443 --certificate-authority="$P/ca.crt" --embed-certs=true --kubeconfig="$f" >/dev/null
  "$KUBECTL" config set-credentials "system:node:$n" --client-certificate="$d/kubelet-client.crt" --client-key="$d/kubelet-client.key" --embed-certs=true --kubeconfig="$f" >/dev/null
  "$KUBECTL" config set-context default --cluster=local --user="system:node:$n" --kubeconfig="$f" >/dev/null
  "$KUBECTL" config use-context default --kubeconfig="$f" >/dev/null
}

# The mounts a new mount namespace copies from the host that the node may keep: the root
# and the kernel's pseudo filesystems. Everything else (other tests' loop-device
# filesystems, FUSE clients, namespace pins, the vm node's kubelet mounts) is detached in
# the node's copy, or the node would hold it busy for as long as it lives.
keep_mount() {
  case "$1" in
    /|/proc|/proc/*|/sys|/sys/*|/dev|/dev/*) return 0 ;;
  esac
  return 1
}

up() {
  local n=$1 ip=$2 zone=$3 pool_mib=${4:-0} d
  valid_name "$n"; d=$(nd "$n")
  [ -x "$BIN_DIR/kubelet" ] || die "$BIN_DIR/kubelet missing: run build.sh"
  [ -s "$P/ca.key" ] || die "no cluster PKI: run up.sh first"
  [ ! -e "$d/ns/mnt" ] || die "node $n exists: node.sh down $n first"
  grep -qx "node $n" "$OWNED" 2>/dev/null || own node "$n"
  net_up
  mkdir -p "$d"/{ns,kubelet,containerd/run,containerd/lib,containerd/root,containerd/state,cni/net.d,cni/ipam,cni/lib,pod-logs,log-containers,pool}
  node_pki "$n" "$ip"
  # The namespace pins need a private mount to live on (a mount namespace cannot be pinned
  # on a shared mount: it could propagate into itself).
  mount --bind "$d/ns" "$d/ns"
  mount --make-private "$d/ns"
  touch "$d/ns/mnt" "$d/ns/net" "$d/ns/uts"
  while read -r h; do own cgroup "$h/filevol-e2e-$n"; done < <(hierarchies)
  mkcg "filevol-e2e-$n/sys"
  # The holder: makes the namespaces (propagation private: nothing the node mounts reaches
  # the host, nothing the host mounts later reaches the node) and keeps them alive.
  setsid unshare --mount="$d/ns/mnt" --net="$d/ns/net" --uts="$d/ns/uts" --propagation private \
    sleep infinity < /dev/null > /dev/null 2>&1 8>&- &
  local hp=$!
  record_pid "$n/holder" "$hp"
  local i
  for ((i = 0; i < 100; i++)); do
    [ "$(stat -f -c %T "$d/ns/net" 2>/dev/null)" = nsfs ] && [ "$(stat -f -c %T "$d/ns/mnt" 2>/dev/null)" = nsfs ] && break
    sleep 0.05
  done
  [ "$(stat -f -c %T "$d/ns/mnt" 2>/dev/null)" = nsfs ] || die "$n: namespaces not pinned"
  log "$n: namespaces pinned (holder pid $hp)"
  # Inside: drop the host's copied mounts (the topmost of each subtree: a lazy unmount takes
  # its children along; one umount for all: a thousand of them cost 20 s), then mount the node's own directories.
  nsx "$n" bash -c '
    awk "{print \$5}" /proc/self/mountinfo | while read -r m; do printf "%b\n" "$m"; done | LC_ALL=C sort -u |
    awk "/^\/(proc|sys|dev)(\/|\$)/ || \$0 == \"/\" {next} p != \"\" && index(\$0, p \"/\") == 1 {next} {print; p = \$0}" |
    xargs -r -d "\n" umount -l 2>/dev/null; true'
  nsx "$n" bash -euo pipefail -c '
    n=$1 ip=$2 d=$3 mib=$4 pool=$5 kroot=$6
    hostname "$n"
    ip link set lo up
    b() { mkdir -p "$2"; mount --bind "$1" "$2"; }
    # Nothing of the host may stay under our kubelet root: containerd judges a Bidirectional
    # mount by the mount it finds at that path, and a copy left below ours is private
    # ("... is not a shared mount", seen once in five runs on one node).
    for i in 1 2 3 4 5; do mountpoint -q "$kroot" || break; umount -l "$kroot"; done
    b "$d/kubelet" "$kroot"
    mount --make-rshared "$kroot"
    at=$(awk -v k="$kroot" "\$5 == k" /proc/self/mountinfo)
    [ "$(wc -l <<<"$at")" = 1 ] && [[ $at == *" shared:"* ]] ||
      { echo "$n: $kroot is not one shared mount: $at" >&2; exit 1; }
    b "$d/containerd/run" /run/containerd
    b "$d/containerd/lib" /var/lib/containerd
    b "$d/cni/lib" /var/lib/cni
    b "$d/log-containers" /var/log/containers
    b "$d/pool" "$pool"
    if [ "$mib" -gt 0 ]; then mount -t tmpfs -o size="${mib}m",mode=0700 "fve2e-pool-$n" "$pool"; fi
  ' _ "$n" "$ip" "$d" "$pool_mib" "$MN_POOL" "$KUBELET_ROOT"
  # The veth: fve-NAME on the bridge, eth0 inside.
  ip link del "fve-$n" 2>/dev/null || true
  ip link add "fve-$n" type veth peer name "fvp-$n"
  ip link set "fvp-$n" netns "$d/ns/net"
  ip link set "fve-$n" master "$MN_BRIDGE" up
  nsx "$n" ip link set "fvp-$n" name eth0
  nsx "$n" ip addr add "$ip/$MN_PREFIX" dev eth0
  nsx "$n" ip link set eth0 up
  echo "$ip $zone $pool_mib" > "$d/node.env"
  write_configs "$n" "$ip"
  ssh_config "$n" "$ip"
  start_procs "$n"
  ctrx "$n" version >/dev/null 2>&1 || sleep 1
  local t
  for ((i = 0; i < 120; i++)); do ctrx "$n" version >/dev/null 2>&1 && break; sleep 0.25; done
  for t in pause busybox agnhost glibc-dns-testing; do ctrx "$n" -n k8s.io images import "$IMG_DIR/$t.tar" >/dev/null; done
  if [ -s "$REPO_ROOT/_output/images/images.txt" ]; then
    while read -r tar _; do ctrx "$n" -n k8s.io images import "$REPO_ROOT/_output/images/$tar" >/dev/null; done < "$REPO_ROOT/_output/images/images.txt"
  fi
  log "$n: images imported"
  start_kubelet "$n"
}

ctrx() { local n=$1; shift; ctr --address "$(nd "$n")/containerd/containerd.sock" "$@"; }

write_configs() {
  local n=$1 ip=$2 d; d=$(nd "$n")
  local C=$d/containerd
  containerd_config "$C" "$C/containerd.sock" "$d/cni/net.d" > "$C/config.toml"
  # Pods reach only their own node's bridge (the node's network namespace): no traffic
  # between nodes' pods is needed, and none can go off the machine.
  local sub=10.90.${n#n}.0/24
  cat > "$d/cni/net.d/10-filevol-e2e.conflist" <<EOF
{"cniVersion": "0.4.0", "name": "filevol-e2e-$n", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": false, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$sub"}]], "dataDir": "$d/cni/ipam"}},
  {"type": "loopback"}]}
EOF
  sed -e "s#^address: .*#address: $ip#" \
      -e "s#^tlsCertFile: .*#tlsCertFile: $d/pki/kubelet.crt#" \
      -e "s#^tlsPrivateKeyFile: .*#tlsPrivateKeyFile: $d/pki/kubelet.key#" \
      -e "s#^containerRuntimeEndpoint: .*#containerRuntimeEndpoint: unix://$C/containerd.sock#" \
      -e "s#^imageServiceEndpoint: .*#imageServiceEndpoint: unix://$C/containerd.sock#" \
      -e "s#^cgroupRoot: .*#cgroupRoot: /filevol-e2e-$n#" \
      -e "s#^podLogsDir: .*#podLogsDir: $d/pod-logs#" \
      "$STATE_DIR/kubelet-config.yaml" > "$d/kubelet-config.yaml"
}

start_procs() {
  local n=$1 d; d=$(nd "$n")
  start "$n" containerd containerd --config "$d/containerd/config.toml"
  start "$n" fwd socat TCP-LISTEN:6443,bind=127.0.0.1,reuseaddr,fork TCP:$MN_HOST_IP:6443
  [ ! -s "$d/pool-client.env" ] || start_pool_client "$n"
  [ ! -s "$d/ceph-client.env" ] || start_ceph_client "$n"
  start_sshd "$n"
}
# start_ceph_client NAME: the node's ceph-fuse (ceph-client), one of the node's processes,
# as start_pool_client's GlusterFS client is: a dead or evicted client's mount is unmounted
# lazily first (loop devices on its files may hold it), and revive mounts a new client.
start_ceph_client() {
  local n=$1 d conf mnt i; d=$(nd "$n"); read -r conf mnt < "$d/ceph-client.env"
  if nsx "$n" findmnt -n -t fuse.ceph-fuse "$mnt" >/dev/null 2>&1; then nsx "$n" umount -l "$mnt"; fi
  start "$n" ceph-client ceph-fuse -f -c "$conf" -n "client.$n" "$mnt"
  for ((i = 0; i < 240; i++)); do
    [ -n "$(nsx "$n" findmnt -n -t fuse.ceph-fuse "$mnt" 2>/dev/null)" ] && return 0
    sleep 0.25
  done
  die "$n: the CephFS of $conf not mounted at $mnt"
}
# running PID: the process runs (a zombie, which this script has not reaped, does not).
running() {
  local st
  st=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  st=${st##*) }
  [ "${st:0:1}" != Z ]
}
# start_pool_client NAME: the node's FUSE client of the shared pool's GlusterFS volume
# (pool-client), one of the node's processes: `kill` kills it (a dead node's client is
# dead), its veth cut cuts it off the server, `revive` mounts again (a dead client's
# mount is lazily unmounted first: its FUSE connection is gone for good).
start_pool_client() {
  local n=$1 d server vol mnt wait_file i; d=$(nd "$n"); read -r server vol mnt wait_file < "$d/pool-client.env"
  # A volume on TLS: its files, which filevol's node plugin installs from the chart's Secret,
  # must be there first (as a node's mount unit would wait for them).
  if [ -n "$wait_file" ]; then
    for ((i = 0; i < 1200; i++)); do nsx "$n" test -s "$wait_file" && break; sleep 0.25; done
    nsx "$n" test -s "$wait_file" || die "$n: $wait_file did not appear in 300 s (filevol's shared node plugin installs it from the Secret)"
  fi
  # A client killed with the node leaves its mount dead (its FUSE connection is gone for
  # good): unmounted lazily, as loop devices the node attached on its files may hold it.
  if nsx "$n" findmnt -n -t fuse.glusterfs "$mnt" >/dev/null 2>&1; then nsx "$n" umount -l "$mnt"; fi
  # A client that exits at once is started again: a node that died silently (`kill` cuts
  # its link first) left the server a connection it has not given up yet, and the new
  # client, binding the same reserved source port, is reset by it (seen: "disconnected
  # from remote-host ... Exhausted all volfile servers" 0.1 s after the start; the
  # server drops the old connection within its keepalive, about 5 s).
  local attempt p
  for ((attempt = 0; attempt < 12; attempt++)); do
    start "$n" pool-client glusterfs -N --process-name fuse --volfile-server="$server" --volfile-id="$vol" \
      --entry-timeout=0 --attribute-timeout=0 --log-file="$LOG_DIR/cluster/$n/pool-client-glusterfs.log" "$mnt"
    p=$(awk -v w="$n/pool-client" '$1 == w {p = $2} END {print p}' "$PIDS_FILE")
    for ((i = 0; i < 240; i++)); do
      [ -n "$(nsx "$n" findmnt -n -t fuse.glusterfs "$mnt" 2>/dev/null)" ] && return 0
      running "$p" || break
      sleep 0.25
    done
    running "$p" && break   # alive but not mounted in 60 s: not this
    log "$n: the GlusterFS client exited before it mounted (attempt $((attempt + 1))): starting it again in 2 s"
    sleep 2
  done
  die "$n: the shared pool's volume $vol not mounted at $mnt"
}
start_kubelet() {
  local n=$1 d ip zone; d=$(nd "$n"); read -r ip zone _ < "$d/node.env"
  start "$n" kubelet "$BIN_DIR/kubelet" --config="$d/kubelet-config.yaml" --kubeconfig="$d/kubelet.kubeconfig" \
    --root-dir="$KUBELET_ROOT" --hostname-override="$n" --node-ip="$ip" \
    --node-labels="topology.kubernetes.io/zone=$zone" --v=2
}

# kubelet_pid NAME: the node's kubelet, if it runs (the last record that is still the
# process it names; a zombie counts as gone).
kubelet_pid() {
  local name p st found=
  [ -s "$PIDS_FILE" ] || return 1
  while read -r name p st; do
    [ "$name" = "$1/kubelet" ] && [ "$(proc_start "$p" 2>/dev/null)" = "$st" ] || continue
    running "$p" && found=$p
  done < "$PIDS_FILE"
  [ -n "$found" ] && echo "$found"
}
# kubelet_ctl ACTION NAME: stop|start|is-active, as kubelet.sh does for vm.
kubelet_ctl() {
  local a=$1 n=$2 p i
  valid_name "$n"
  case $a in
    start) kubelet_pid "$n" >/dev/null || start_kubelet "$n" ;;
    stop)
      p=$(kubelet_pid "$n") || return 0
      kill -TERM "$p"
      for ((i = 0; i < 200; i++)); do kubelet_pid "$n" >/dev/null || break; sleep 0.1; done
      if kubelet_pid "$n" >/dev/null; then kill -KILL "$p"; sleep 0.2; log "$n: kubelet killed (pid $p) after 20s"
      else log "$n: kubelet stopped (pid $p)"; fi ;;
    is-active) if kubelet_pid "$n" >/dev/null; then echo active; else echo inactive; return 3; fi ;;
    *) die "usage: node.sh kubelet stop|start|is-active NAME" ;;
  esac
}

# node_pids NAME: the node's recorded processes that still are what we started, and
# everything in its cgroup sys/ (containerd's shims) and kubepods/ (containers).
stop_all() { # NAME SIGNAL
  local n=$1 sig=$2 name p st i
  if [ -s "$PIDS_FILE" ]; then
    while read -r name p st; do
      [[ $name == "$n/"* && $name != "$n/holder" ]] || continue
      [ "$(proc_start "$p" 2>/dev/null)" = "$st" ] && kill "-$sig" "$p" 2>/dev/null || true
    done < "$PIDS_FILE"
  fi
  [ "$sig" = KILL ] || for ((i = 0; i < 100; i++)); do
    [ -z "$(cg_procs "filevol-e2e-$n/sys" | head -1)" ] && break; sleep 0.1; done
  for ((i = 0; i < 50; i++)); do
    local ps; ps=$(cg_procs "filevol-e2e-$n")
    [ -n "$ps" ] || break
    # shellcheck disable=SC2086
    kill -KILL $ps 2>/dev/null || true
    sleep 0.1
  done
}

kill_node() {
  local n=$1
  valid_name "$n"
  # The link first: a machine that loses its power says nothing more, where a process
  # killed on a live kernel has its connections closed for it (a shared pool's server
  # then drops its client at once: CephFS's MDS does, and lets its locks go).
  ip link set "fve-$n" down
  stop_all "$n" KILL
  log "$n: cut off the network, then killed (kubelet, containerd, shims, containers, forwarder)"
}

revive() {
  local n=$1
  valid_name "$n"
  ip link set "fve-$n" up
  start_procs "$n"
  local i
  for ((i = 0; i < 120; i++)); do ctrx "$n" version >/dev/null 2>&1 && break; sleep 0.25; done
  # containerd answers ctr before its CRI plugin is ready, and kubelet checks the CRI once at
  # start and exits ("validate CRI v1 runtime API ...: server is not initialized yet", seen
  # under a load of 30): the kubelet is started again until it stays up.
  for ((i = 0; i < 20; i++)); do
    start_kubelet "$n"
    sleep 3
    kubelet_pid "$n" >/dev/null && return 0
    log "$n: kubelet exited at start (containerd's CRI not ready yet?): starting it again"
  done
  die "$n: kubelet exits at start: $(tail -n 3 "$LOG_DIR/cluster/$n/kubelet.log" 2>/dev/null)"
}

down() {
  local n=$1 d hp i
  valid_name "$n"; d=$(nd "$n")
  stop_all "$n" TERM
  # The holder last: with no process left in them, the namespaces die with their pins.
  if [ -s "$PIDS_FILE" ]; then
    while read -r name p st; do
      [ "$name" = "$n/holder" ] && [ "$(proc_start "$p" 2>/dev/null)" = "$st" ] && kill -KILL "$p" 2>/dev/null || true
    done < "$PIDS_FILE"
  fi
  ip link del "fve-$n" 2>/dev/null || true
  for f in mnt net uts; do umount "$d/ns/$f" 2>/dev/null || umount -l "$d/ns/$f" 2>/dev/null || true; done
  while mountpoint -q "$d/ns" 2>/dev/null; do umount "$d/ns" 2>/dev/null || umount -l "$d/ns"; done
  # Loop devices still backed by the node's files (a leak, or a node killed with its
  # volumes staged): by identity, a file under $d with that device and inode.
  local dev majmin ino back fsdev
  fsdev=$(stat -c %d "$d" 2>/dev/null || echo none)
  while IFS=$'\x1f' read -r dev majmin ino back; do
    [[ $majmin =~ ^[0-9]+:[0-9]+$ ]] || continue
    local ma=${majmin%%:*} mi=${majmin##*:}
    [ "$(( (mi & 0xff) | (ma << 8) | ((mi & ~0xff) << 12) ))" = "$fsdev" ] || continue
    [ -n "$(find "$d" -xdev -inum "$ino" -print -quit 2>/dev/null)" ] || continue
    losetup -d "$dev" && log "  $n: detached $dev ($back)" && echo "$dev $back ($n)" >> "$LOG_DIR/detached-loops.txt"
  done < <(losetup -J -O NAME,BACK-MAJ:MIN,BACK-INO,BACK-FILE 2>/dev/null | jq -r '.loopdevices[]? |
    [.name, ((.["back-maj:min"] // "") | gsub(" "; "")), ((.["back-ino"] // "") | tostring), (.["back-file"] // "")] | join("\u001f")' || true)
  while read -r h; do
    [ -d "$h/filevol-e2e-$n" ] && find "$h/filevol-e2e-$n" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  done < <(hierarchies)
  if [ -d "$d/pod-logs" ] && [ -n "$(ls -A "$d/pod-logs" 2>/dev/null)" ]; then
    mkdir -p "$LOG_DIR/cluster/$n" && cp -a "$d/pod-logs" "$LOG_DIR/cluster/$n/" 2>/dev/null || true
  fi
  [ -z "$(mounts_under "$d")" ] || die "$n: mounts left under $d: $(mounts_under "$d" | tr '\n' ' ')"
  rm -rf --one-file-system "$d"
  if [ -s "$PIDS_FILE" ]; then grep -v "^$n/" "$PIDS_FILE" > "$PIDS_FILE.tmp" || true; mv -f "$PIDS_FILE.tmp" "$PIDS_FILE"; fi
  log "$n: down"
}

net_down() {
  local name p st
  if [ -s "$PIDS_FILE" ]; then
    while read -r name p st; do
      [ "$name" = fwd-host ] && [ "$(proc_start "$p" 2>/dev/null)" = "$st" ] && kill -TERM "$p" 2>/dev/null || true
    done < "$PIDS_FILE"
    grep -v '^fwd-host ' "$PIDS_FILE" > "$PIDS_FILE.tmp" || true; mv -f "$PIDS_FILE.tmp" "$PIDS_FILE"
  fi
  if owned link | grep -qx "$MN_BRIDGE" && ip link show "$MN_BRIDGE" >/dev/null 2>&1; then ip link del "$MN_BRIDGE"; fi
  rmdir "$NODES_DIR" 2>/dev/null || true
  return 0
}

cmd=${1:-}; shift || true
case $cmd in
  up) [ $# -ge 3 ] || die "usage: node.sh up NAME IP ZONE [POOL_MIB]"; up "$@" ;;
  down) down "$1" ;;
  kill) kill_node "$1" ;;
  revive) revive "$1" ;;
  net-up) net_up ;;
  net-down) net_down ;;
  exec) n=$1; shift; valid_name "$n"; nsx "$n" "$@" ;;
  pool-client) [ $# = 4 ] || [ $# = 5 ] || die "usage: node.sh pool-client NAME SERVER VOLUME MOUNTPOINT [WAIT_FILE]"
    valid_name "$1"; echo "$2 $3 $4 ${5:-}" > "$(nd "$1")/pool-client.env"; start_pool_client "$1" ;;
  ceph-client) [ $# = 3 ] || die "usage: node.sh ceph-client NAME CONF MOUNTPOINT"
    valid_name "$1"; echo "$2 $3" > "$(nd "$1")/ceph-client.env"; start_ceph_client "$1" ;;
  names) owned node ;;
  mount) [ $# = 4 ] || die "usage: node.sh mount NAME SOURCE MOUNTPOINT TYPE"
    valid_name "$1"; nsx "$1" mkdir -p "$3"; nsx "$1" mount -t "$4" "$2" "$3" ;;
  ctr) n=$1; shift; valid_name "$n"; ctrx "$n" "$@" ;;
  kubelet) [ $# = 2 ] || die "usage: node.sh kubelet stop|start|is-active NAME"; kubelet_ctl "$1" "$2" ;;
  *) sed -n '2,48p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
