# Shared settings for build.sh / up.sh / down.sh / smoke.sh. Source it; do not run it.
# shellcheck shell=bash

CLUSTER_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$CLUSTER_DIR/../../.." && pwd)
TOOLS_DIR=$CLUSTER_DIR/tools
# shellcheck source=versions.env
source "$CLUSTER_DIR/versions.env"

CACHE_ROOT=${FILEVOL_E2E_CACHE:-/var/cache/filevol-e2e}
STATE_DIR=${FILEVOL_E2E_STATE:-/var/lib/filevol-e2e}
LOG_DIR=${FILEVOL_E2E_LOGS:-$REPO_ROOT/_output/e2e}
# Hard-coded by the e2e storage suite (volumemode.go, utils.go): must be /var/lib/kubelet.
# Overridable only so that guard_test.go can point the scripts at a directory of its own.
KUBELET_ROOT=${FILEVOL_E2E_KUBELET_ROOT:-/var/lib/kubelet}
NODE_NAME=vm            # resolves to 127.0.0.1 through /etc/hosts (apiserver -> kubelet)
# The node's InternalIP, on lo: the kubelet refuses a loopback node IP, and the upstream
# [Disruptive] tests ssh to the node's address (up.sh runs an sshd there and nowhere else).
# Not routable from the pods (their bridge has no gateway) nor, as a /32 on lo, announced.
NODE_IP=10.89.0.1
# Our kubelet's cgroupRoot: its pods live under <hierarchy>/filevol-e2e/kubepods, never in
# the /kubepods of a real node's kubelet, so each side's cgroups are told apart by path.
CGROUP_NAME=filevol-e2e
CGROUP_FS=/sys/fs/cgroup
BRIDGE=filevol-e2e0     # CNI bridge: no gateway, no masquerade, pod traffic stays on it
POD_SUBNET=10.88.0.0/16
SERVICE_CIDR=10.0.0.0/24

# cluster_versions: versions.env but its SNAPSHOT_METADATA_ and VELERO_ lines, which
# snapshot-metadata.sh and velero.sh key caches of their own on: what the cluster's
# builds depend on.
cluster_versions() { grep -v -e '^SNAPSHOT_METADATA_' -e '^VELERO_' "$CLUSTER_DIR/versions.env"; }

# The cache key: every input of the Go builds (versions, the pinned go.mod/go.sum files,
# the Go toolchain). Changing any of them selects a fresh cache directory.
versions_key() {
  local h
  h=$( {
      cluster_versions
      find "$TOOLS_DIR" \( -name go.mod -o -name go.sum -o -name '*.go' \) -print0 | sort -z | xargs -0 cat
      go version
      echo "cgo=0 buildvcs=false"
    } | sha256sum | cut -c1-12)
  echo "k8s-${KUBE_VERSION}-${h}"
}

# FILEVOL_E2E_KEY: the key, already computed (the node's ssh sessions get it from up.sh,
# since they may have no Go on their PATH; guard_test.go saves the hashing).
KEY=${FILEVOL_E2E_KEY:-$(versions_key)}
KEY_DIR=$CACHE_ROOT/$KEY
BIN_DIR=$KEY_DIR/bin
IMG_DIR=$KEY_DIR/images

KUBECTL=$BIN_DIR/kubectl
ADMIN_KUBECONFIG=$STATE_DIR/admin.kubeconfig
CONTAINERD_SOCK=$STATE_DIR/containerd/containerd.sock

log() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { log "ERROR: $*" >&2; exit 1; }

# The ownership stamp: what up.sh started and created, so down.sh stops and removes exactly
# that and nothing else (a machine may be a real Kubernetes node too).
#   pids   "name pid starttime", one process per line (record_pid)
#   owned  "kind what...", one thing up.sh created per line, written BEFORE creating it,
#          so that a killed up.sh leaves no thing the stamp does not name:
#            dir PATH                a directory at a hard-coded path that was absent
#            mount PATH DEV:INO      our bind mount of $STATE_DIR/kubelet on PATH
#            cgroup DIR              a cgroup directory (our kubelet's cgroupRoot)
#            chain IPT TABLE CHAIN   an iptables chain our kubelet makes, absent before
#            addr ADDRESS DEV        the node's address, and link NAME, the CNI bridge
PIDS_FILE=$STATE_DIR/pids
OWNED=$STATE_DIR/owned
# Start time of a process (clock ticks since boot, field 22 of /proc/PID/stat): recorded
# with each PID so that down.sh never signals a reused PID.
proc_start() {
  local s
  s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  s=${s##*) }
  # shellcheck disable=SC2086
  set -- $s
  echo "${20}"
}
# record_pid NAME PID: make down.sh stop this process (newest records are stopped first).
# Scripts that start the driver or sidecars on the cluster should call this.
record_pid() { echo "$1 $2 $(proc_start "$2")" >> "$PIDS_FILE"; }
# is_recorded PID: the process PID is one we started (its start time matches the record).
is_recorded() {
  [ -s "$PIDS_FILE" ] || return 1
  local n p st
  while read -r n p st; do
    [ "$p" = "$1" ] && [ "$(proc_start "$p" 2>/dev/null)" = "$st" ] && return 0
  done < "$PIDS_FILE"
  return 1
}
# own KIND WHAT...: add a line to the stamp (before creating the thing it names).
own() { mkdir -p "$STATE_DIR"; echo "$*" >> "$OWNED"; }
# owned KIND: print the stamp's lines of that kind, without the kind.
owned() { [ -s "$OWNED" ] && awk -v k="$1" '$1 == k { sub(/^[^ ]+ /, ""); print }' "$OWNED"; return 0; }
# server_netns DIR LINK PEER IP/PREFIX BRIDGE: a network namespace of a server of the
# multi-node cluster's (gluster.sh, ceph.sh), pinned at DIR/net (DIR a private bind mount
# of itself, under the state dir: down.sh unmounts it), reached through the veth LINK
# (stamped) on BRIDGE, its end PEER renamed eth0 with IP inside.
server_netns() {
  local dir=$1 link=$2 peer=$3 ip=$4 bridge=$5
  mount --bind "$dir" "$dir"
  mount --make-private "$dir"
  touch "$dir/net"
  unshare --net="$dir/net" true
  own link "$link"
  ip link add "$link" type veth peer name "$peer"
  ip link set "$peer" netns "$dir/net"
  ip link set "$link" master "$bridge" up
  nsenter --net="$dir/net" ip link set lo up
  nsenter --net="$dir/net" ip link set "$peer" name eth0
  nsenter --net="$dir/net" ip addr add "$ip" dev eth0
  nsenter --net="$dir/net" ip link set eth0 up
}
# dev_ino PATH: what a bind mount of PATH shows at its mount point too.
dev_ino() { stat -c '%d:%i' "$1" 2>/dev/null; }
# kubelet_root_ours: $KUBELET_ROOT is our bind mount of $STATE_DIR/kubelet, as stamped.
kubelet_root_ours() {
  local m di
  m=$(owned mount | awk -v r="$KUBELET_ROOT" '$1 == r {print $2}' | tail -1)
  di=$(dev_ino "$KUBELET_ROOT") || return 1
  [ -n "$m" ] && [ "$m" = "$di" ] && [ "$di" = "$(dev_ino "$STATE_DIR/kubelet")" ]
}

# Kubernetes node programs, by the name of their executable. Only ever used to find what
# we must NOT touch: nothing is signalled by name.
KUBE_PROGS=(kubelet kube-apiserver kube-controller-manager kube-scheduler kube-proxy etcd)
# foreign_kube: "name pid" of every running Kubernetes program this harness did not start
# (a real node's kubelet, another cluster's apiserver...). Zombies have no exe: skipped.
foreign_kube() {
  local args=() n d p
  for n in "${KUBE_PROGS[@]}"; do args+=(-o -lname "*/$n" -o -lname "*/$n (deleted)"); done
  # find fails on processes that exit while it looks: not an error here.
  { find /proc -mindepth 2 -maxdepth 2 -name exe \( -false "${args[@]}" \) -printf '%h %l\n' 2>/dev/null || true; } |
  while read -r d p; do
    p=${p% (deleted)}; p=${p##*/}
    is_recorded "${d#/proc/}" || echo "$p ${d#/proc/}"
  done
}
# describe_pids "name pid"...: one line each, with the command line, for messages.
describe_pids() {
  local n p
  while read -r n p; do
    [ -n "$p" ] || continue
    echo "    $n pid $p: $(tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | cut -c1-160)"
  done
}
# foreign_cgroups: cgroups of a real node's kubelet that hold processes (reported, never
# touched): <hierarchy>/kubepods and kubepods.slice, the cgroupfs and systemd layouts.
foreign_cgroups() {
  local c
  for c in "$CGROUP_FS"/*/kubepods "$CGROUP_FS"/*/kubepods.slice "$CGROUP_FS"/kubepods "$CGROUP_FS"/kubepods.slice; do
    [ -d "$c" ] || continue
    [ -n "$(find "$c" -name cgroup.procs -exec cat {} + 2>/dev/null | head -1)" ] && echo "$c"
  done
  return 0
}
# mounts_under DIR: the mount points at or under DIR (mountinfo unescaped), deepest first.
mounts_under() {
  awk '{print $5}' /proc/self/mountinfo | while read -r m; do
    m=$(printf '%b' "$m")
    case "$m" in "$1"|"$1"/*) echo "$m" ;; esac
  done | awk '{print length($0) " " $0}' | sort -rn | cut -d' ' -f2- | uniq
}

# containerd_config DIR SOCKET CNI_CONF_DIR: a node's containerd configuration, all its
# state under DIR (root, state, opt, runc root). restrict_oom_score_adj: root here lacks
# CAP_SYS_RESOURCE, so the -998 containerd gives sandboxes makes runc fail ("can't get
# final child's PID from pipe"); clamp to our own. Pod network namespaces under our state
# dir (netns_mounts_under_state_dir), not in /run/netns with a real node's.
# config_path: registry hosts (hosts.toml per registry) under DIR/certs.d, read at each
# pull; nothing is there unless a story puts it there (test/e2e/quickstart mirrors
# registry.k8s.io to the harness's registry), so the node pulls as containerd's defaults say.
containerd_config() {
  local C=$1 sock=$2 cni=$3
  cat <<EOF
version = 2
root = "$C/root"
state = "$C/state"
[grpc]
  address = "$sock"
[ttrpc]
  address = ""
[debug]
  address = ""
[metrics]
  address = ""
[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "$C/opt"
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "$PAUSE_TAG"
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    enable_selinux = false
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
          BinaryName = "$(command -v runc)"
          Root = "$C/runc-root"
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "$cni"
    [plugins."io.containerd.grpc.v1.cri".registry]
      config_path = "$C/certs.d"
EOF
}

# fg COMMAND...: run COMMAND as the one current child ($CHILD), so that a signal reaches
# the caller's trap at once (bash runs traps only between commands, and wait is
# interruptible) and the trap can stop the child before tearing the cluster down.
CHILD=
# go_failures LOG: each failed test of a `go test -v` log, with the last lines of its own
# output (its t.Log/t.Error/t.Fatal lines, each cut to 300 characters): the summary, all
# that a CI tail shows, then says why a test failed, not only which.
go_failures() {
  awk '
    /^ *=== (RUN|CONT|NAME) / { cur = $3 }
    /^ +[^ ]+_test\.go:[0-9]+: / {
      line = $0; sub(/^ +/, "", line)
      if (length(line) > 300) line = substr(line, 1, 300) "..."
      buf[cur, n[cur]++ % 6] = line
    }
    /^ *--- FAIL: / {
      name = $3; print "FAIL " name
      k = n[name] > 6 ? n[name] - 6 : 0
      for (; k < n[name]; k++) print "    " buf[name, k % 6]
    }' "$1"
}

fg() { "$@" & CHILD=$!; local rc=0; wait "$CHILD" || rc=$?; CHILD=; return "$rc"; }
