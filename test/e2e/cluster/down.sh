#!/usr/bin/env bash
# Tear the e2e cluster down completely; safe to run any number of times, and after a
# killed session (up.sh runs it first for exactly that reason).
#
#  1. (graceful, if the apiserver answers) stop the controllers, delete every pod so the
#     kubelet stops sandboxes and unmounts volumes itself;
#  2. stop every process up.sh recorded in $STATE_DIR/pids, by PID, newest first, after
#     checking the PID still is the process we started (its start time is recorded);
#  3. stop containerd shims and container processes that outlived containerd, found by
#     the PIDs containerd wrote into our own state dir (never by name);
#  4. unmount everything under /var/lib/kubelet and the state dir, and the pod netns;
#  5. detach loop devices backed by files under the state dir or /var/lib/kubelet;
#  6. delete the CNI bridge, the pod cgroups, and the state (PKI is kept);
#  7. remove the empty directories kubelet/containerd/libcni create at hard-coded paths.
#
# FILEVOL_E2E_GRACEFUL=0 skips step 1 (up.sh uses that for leftovers).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[ "$(id -u)" = 0 ] || die "down.sh must run as root"

GRACEFUL=${FILEVOL_E2E_GRACEFUL:-1}
PIDS=$PIDS_FILE
TASKS=$STATE_DIR/containerd/state/io.containerd.runtime.v2.task

alive() { # a zombie (state Z, waiting for PID 1 to reap it) counts as gone
  kill -0 "$1" 2>/dev/null || return 1
  local st; st=$(cat "/proc/$1/stat" 2>/dev/null) || return 1; st=${st##*) }
  [ "${st:0:1}" != Z ]
}
stop_pid() { # name pid [timeout seconds]
  local n=$1 p=$2 t=${3:-15} i
  alive "$p" || return 0
  kill -TERM "$p" 2>/dev/null || true
  for ((i = 0; i < t * 10; i++)); do alive "$p" || break; sleep 0.1; done
  if alive "$p"; then kill -KILL "$p" 2>/dev/null || true; log "  killed $n ($p) after ${t}s"; sleep 0.2
  else log "  stopped $n ($p)"; fi
}
recorded() { # name -> "pid" if that recorded process is still ours and alive
  [ -s "$PIDS" ] || return 1
  local n p st
  while read -r n p st; do
    if [ "$n" = "$1" ] && [ "$(proc_start "$p" 2>/dev/null)" = "$st" ]; then echo "$p"; return 0; fi
  done < "$PIDS"
  return 1
}

did=0
# ---- 1. graceful: let the kubelet tear pods down itself -------------------------------
if [ "$GRACEFUL" = 1 ] && recorded kube-apiserver >/dev/null && recorded kubelet >/dev/null && [ -x "$KUBECTL" ] &&
   "$KUBECTL" --kubeconfig "$ADMIN_KUBECONFIG" get --raw /readyz >/dev/null 2>&1; then
  did=1
  log "down: deleting pods (controllers stopped first so nothing is recreated)"
  for n in snapshot-controller kube-controller-manager kube-scheduler; do
    p=$(recorded "$n") && stop_pid "$n" "$p"
  done
  "$KUBECTL" --kubeconfig "$ADMIN_KUBECONFIG" delete pods --all --all-namespaces --grace-period="${FILEVOL_E2E_POD_GRACE:-2}" --wait=true --timeout=60s \
    >/dev/null 2>&1 || log "  (pods not all gone after 60s; continuing)"
fi

# ---- 2. recorded processes, newest first ----------------------------------------------
if [ -s "$PIDS" ]; then
  did=1
  log "down: stopping recorded processes"
  tac "$PIDS" | while read -r n p st; do
    if [ "$(proc_start "$p" 2>/dev/null)" = "$st" ]; then
      stop_pid "$n" "$p" 20
    fi
  done
  rm -f "$PIDS"
fi

# ---- 3. shims and containers that outlived containerd ----------------------------------
# containerd 1.6 writes, per task, init.pid (the container's first process, a child of its
# shim) and address (the shim's socket) into the bundle dirs under our own state dir. The
# shims are found from those (parent of init, listener of the socket), and are only
# signalled when their command line names our containerd socket.
ours() { tr '\0' ' ' < "/proc/$1/cmdline" 2>/dev/null | grep -qF -- "-address $CONTAINERD_SOCK"; }
if [ -d "$TASKS" ]; then
  shims=()
  for b in "$TASKS"/*/*; do
    [ -d "$b" ] || continue
    if [ -s "$b/init.pid" ]; then
      p=$(cat "$b/init.pid")
      if alive "$p"; then
        pp=$(awk '/^PPid:/{print $2}' "/proc/$p/status" 2>/dev/null || true)
        if [ -n "$pp" ] && ours "$pp"; then kill -KILL "$p" 2>/dev/null || true; shims+=("$pp"); did=1; fi
      fi
    fi
    if [ -s "$b/address" ]; then
      a=$(sed 's#^unix://##' "$b/address")
      for pp in $(ss -xlpH src "$a" 2>/dev/null | grep -o 'pid=[0-9]*' | cut -d= -f2); do
        ours "$pp" && shims+=("$pp")
      done
    fi
  done
  for pp in $(printf '%s\n' "${shims[@]}" | sort -u); do
    stop_pid "containerd-shim" "$pp" 5; did=1
  done
fi
# Anything still in the pod cgroups was started by our kubelet (nothing else uses kubepods).
for c in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
  [ -d "$c" ] || continue
  while read -r f; do
    while read -r p; do [ -n "$p" ] && { kill -KILL "$p" 2>/dev/null || true; did=1; }; done < "$f"
  done < <(find "$c" -name cgroup.procs 2>/dev/null)
  for ((i = 0; i < 50; i++)); do
    [ -z "$(find "$c" -name cgroup.procs -exec cat {} + 2>/dev/null)" ] && break; sleep 0.1
  done
done

# ---- 4. mounts ------------------------------------------------------------------------
# mountinfo field 5 is the mount point, with space/tab/newline/backslash octal-escaped.
our_mounts() {
  awk '{print $5}' /proc/self/mountinfo | while read -r m; do
    m=$(printf '%b' "$m")
    case "$m" in
      "$KUBELET_ROOT"|"$KUBELET_ROOT"/*|"$STATE_DIR"|"$STATE_DIR"/*|/run/netns/cni-*|/var/run/netns/cni-*) echo "$m" ;;
    esac
  done | awk '{print length($0) " " $0}' | sort -rn | cut -d' ' -f2- | uniq
}
for round in 1 2 3 4 5; do
  ms=$(our_mounts)
  [ -n "$ms" ] || break
  did=1
  [ "$round" = 1 ] && log "down: unmounting $(echo "$ms" | wc -l) mounts"
  while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
  done <<<"$ms"
done
left=$(our_mounts)
[ -z "$left" ] || die "mounts left behind: $left"
for n in /run/netns/cni-*; do [ -e "$n" ] && { rm -f "$n"; did=1; }; done

# ---- 5. loop devices backed by our files ----------------------------------------------
# Ours: backed by a file under the state dir or the kubelet dir, or attached by a filevol
# pod. Such a device shows its backing file relative to that pod's mount of the pool
# ("/volumes/<volume ID>.img"), which no host path names once the pod is gone: the driver
# finds those by inode, but if it never got to unstage them (a killed run), they are
# recognised here by filevol's image names on the state directory's filesystem.
state_fs=$(stat -c '%d' "$STATE_DIR" 2>/dev/null || echo none)
# pod_image DEV_MAJ:MIN BACKING: is this a filevol image seen through a pod's mount?
pod_image() {
  [[ $2 =~ ^/(.+/)?volumes/(\.tmp-)?fv(1-[a-z]+-[0-9a-f]{8})?-[0-9a-f]{32}\.img(\ \(deleted\))?$ ]] || return 1
  # MAJ:MIN as the kernel encodes a dev_t for stat(2) (new_encode_dev).
  local ma=${1%%:*} mi=${1##*:}
  [ "$(( (mi & 0xff) | (ma << 8) | ((mi & ~0xff) << 12) ))" = "$state_fs" ]
}
while read -r dev majmin back; do
  case "$back" in
    "$STATE_DIR"/*|"$KUBELET_ROOT"/*) ;;
    *) pod_image "$majmin" "$back" || continue ;;
  esac
  losetup -d "$dev" && log "  detached $dev ($back)" && echo "$dev $back" >> "$LOG_DIR/detached-loops.txt"
  did=1
done < <(losetup -nl -O NAME,BACK-MAJ:MIN,BACK-FILE 2>/dev/null || true)

# ---- 6. bridge, iptables, cgroups, state ---------------------------------------------
# Sandboxes whose CNI DEL never ran (killed runs) leave libcni cache entries keyed by id.
ids=$(ls "$STATE_DIR"/containerd/{root,state}/io.containerd.grpc.v1.cri/sandboxes "$TASKS"/* 2>/dev/null | grep -xE '[0-9a-f]{64}' | sort -u || true)
for id in $ids; do rm -f /var/lib/cni/results/*-"$id"-*; done
if ip link show "$BRIDGE" >/dev/null 2>&1; then ip link del "$BRIDGE"; log "  deleted bridge $BRIDGE"; did=1; fi
# The kubelet creates these chains (and the KUBE-FIREWALL jumps) and never removes them.
# No kube-proxy or other kubelet runs here, so they are ours.
for ipt in iptables ip6tables; do
  command -v $ipt >/dev/null || continue
  for chain in INPUT OUTPUT; do
    while $ipt -w -t filter -C $chain -j KUBE-FIREWALL 2>/dev/null; do $ipt -w -t filter -D $chain -j KUBE-FIREWALL; did=1; done
  done
  for table in filter nat mangle; do
    for chain in KUBE-FIREWALL KUBE-KUBELET-CANARY KUBE-IPTABLES-HINT; do
      if $ipt -w -t $table -nL $chain >/dev/null 2>&1; then
        $ipt -w -t $table -F $chain && $ipt -w -t $table -X $chain && did=1
      fi
    done
  done
done
for c in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
  [ -d "$c" ] || continue
  find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null || true
done
rm -f "$STATE_DIR/kubelet-config.yaml"
# keep whatever container logs are left, next to the cluster logs
if [ -n "$(ls -A "$STATE_DIR/pod-logs" 2>/dev/null)" ]; then
  mkdir -p "$LOG_DIR/cluster" && cp -a "$STATE_DIR/pod-logs" "$LOG_DIR/cluster/" 2>/dev/null || true
fi
for d in etcd containerd kubelet cni pod-logs; do
  [ -e "$STATE_DIR/$d" ] && rm -rf --one-file-system "${STATE_DIR:?}/$d"
done

# ---- 7. hard-coded paths outside the state dir, only what we created ----------------
rmdir "$KUBELET_ROOT" 2>/dev/null || true                        # our bind-mount point
if [ -d /var/log/containers ]; then                              # kubelet's log symlinks
  find /var/log/containers -maxdepth 1 -type l -lname "$STATE_DIR/pod-logs/*" -delete 2>/dev/null || true
  rmdir /var/log/containers 2>/dev/null || true
fi
rm -f /var/lib/cni/results/filevol-e2e-* 2>/dev/null || true      # libcni cache of our network (+ ids above)
rmdir /var/lib/cni/results /var/lib/cni 2>/dev/null || true
# containerd 1.6 puts shim sockets in /run/containerd/s whatever its config says; a shim
# that was killed leaves its socket behind. Remove only sockets nobody listens on.
if [ -d /run/containerd/s ]; then
  listening=$(ss -xlnH 2>/dev/null | grep -oE '/run/containerd/s/[^ ]+' || true)
  for s in /run/containerd/s/*; do
    [ -S "$s" ] || continue
    grep -qxF "$s" <<<"$listening" || rm -f "$s"
  done
fi
rmdir /run/netns /run/containerd/s /run/containerd 2>/dev/null || true

if [ "$did" = 1 ]; then log "down: cluster is down"; else log "down: nothing to do"; fi
