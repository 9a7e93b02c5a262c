#!/usr/bin/env bash
# Tear the e2e cluster down completely; safe to run any number of times, and after a
# killed session (up.sh runs it first for exactly that reason).
#
# It touches only what the ownership stamp names (lib.sh: $STATE_DIR/pids and
# $STATE_DIR/owned, which up.sh writes before it creates each thing) and what lies
# inside our state dir. A machine may also be a real Kubernetes node: its kubelet,
# pods, /kubepods cgroups, mounts under a /var/lib/kubelet that is not our bind mount,
# and KUBE-* chains we did not see appear are left alone, and named on stderr.
#
#  1. (graceful, if the apiserver answers) stop the controllers, delete every pod so the
#     kubelet stops sandboxes and unmounts volumes itself;
#  2. stop every process recorded in $STATE_DIR/pids, by PID, newest first, after
#     checking the PID still is the process we started (its start time is recorded);
#  3. stop containerd shims and container processes that outlived containerd, found by
#     the PIDs containerd wrote into our own state dir (never by name), then whatever is
#     left in our kubelet's cgroups (stamped);
#  4. unmount everything under the state dir, and under /var/lib/kubelet when it is our
#     bind mount (stamped, and the same directory as $STATE_DIR/kubelet);
#  5. detach loop devices backed by our files;
#  6. delete the CNI bridge, the node address, the stamped cgroups and iptables chains,
#     and the state (PKI is kept);
#  7. remove what kubelet/containerd/libcni left at hard-coded paths, when it is ours.
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

# ---- 0. what is not ours: named, and left alone ----------------------------------------
# Looked at before anything is stopped, so that our own processes still count as ours.
foreign=$(foreign_kube)
foreign_cg=$(foreign_cgroups)
if [ -n "$foreign" ] || [ -n "$foreign_cg" ]; then
  {
    log "down: this machine runs Kubernetes programs this harness did not start; leaving them,"
    log "  their pods, cgroups and mounts alone (only what $STATE_DIR/{pids,owned} names is ours):"
    [ -z "$foreign" ] || describe_pids <<<"$foreign"
    [ -z "$foreign_cg" ] || sed 's/^/    cgroup with processes: /' <<<"$foreign_cg"
  } >&2
fi

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

# ---- 1b. extra nodes (node.sh), each with its namespaces, mounts and loop devices ------
for n in $(owned node); do
  did=1
  "$CLUSTER_DIR/node.sh" down "$n" || log "down: node $n: node.sh down failed" >&2
done
[ -z "$(owned node)" ] || "$CLUSTER_DIR/node.sh" net-down

# ---- 2. recorded processes, newest first ----------------------------------------------
if [ -s "$PIDS" ]; then
  did=1
  log "down: stopping recorded processes"
  tac "$PIDS" | while read -r n p st; do
    [ "$(proc_start "$p" 2>/dev/null)" = "$st" ] || continue
    case $n in
      # ceph-fuse (multinode/ceph.sh) leaves its loop on SIGTERM only at its mount's next
      # request, which nothing sends now: it sat out the whole 20 s. Its data is the
      # cluster's, stopped next: nothing to lose.
      ceph-client-*) stop_pid "$n" "$p" 2 ;;
      *) stop_pid "$n" "$p" 20 ;;
    esac
  done
  rm -f "$PIDS"
fi

# ---- 3. shims and containers that outlived containerd ----------------------------------
# containerd 1.6 writes, per task, init.pid (the container's first process, a child of its
# shim) and address (the shim's socket) into the bundle dirs under our own state dir. The
# shims are found from those (parent of init, listener of the socket), and are only
# signalled when their command line names our containerd socket.
ours() { tr '\0' ' ' < "/proc/$1/cmdline" 2>/dev/null | grep -qF -- "-address $CONTAINERD_SOCK"; }
shim_socks=()   # our shims' sockets, in /run/containerd/s whatever containerd's config says
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
      shim_socks+=("$a")
      for pp in $(ss -xlpH src "$a" 2>/dev/null | grep -o 'pid=[0-9]*' | cut -d= -f2); do
        ours "$pp" && shims+=("$pp")
      done
    fi
  done
  for pp in $(printf '%s\n' "${shims[@]}" | sort -u); do
    stop_pid "containerd-shim" "$pp" 5; did=1
  done
fi
# Anything still in our kubelet's cgroups is a container of ours (up.sh created these
# cgroups for it and stamped them). A real node's /kubepods is never looked into.
# cgroup_dir DIR: a cgroup under the cgroup filesystem, not a hierarchy's root (a stamp's
# line is data: never kill or rmdir on what it says without checking).
cgroup_dir() { case "$1" in "$CGROUP_FS"/?*) [ -d "$1" ] && ! mountpoint -q "$1" ;; *) false ;; esac; }
our_cgroups=$(owned cgroup | awk '{print length($0) " " $0}' | sort -rn | cut -d' ' -f2-)
for c in $our_cgroups; do
  cgroup_dir "$c" || continue
  while read -r f; do
    while read -r p; do [ -n "$p" ] && { kill -KILL "$p" 2>/dev/null || true; did=1; }; done < "$f"
  done < <(find "$c" -name cgroup.procs 2>/dev/null)
  for ((i = 0; i < 50; i++)); do
    [ -z "$(find "$c" -name cgroup.procs -exec cat {} + 2>/dev/null)" ] && break; sleep 0.1
  done
done

# ---- 4. mounts ------------------------------------------------------------------------
# Ours: under the state dir (pod netns included: containerd keeps them there, see up.sh),
# and under $KUBELET_ROOT only while it is our bind mount of $STATE_DIR/kubelet. Decided
# once: after our bind mount is gone, $KUBELET_ROOT is a plain directory again.
kroot_ours=0
kubelet_root_ours && kroot_ours=1
our_mounts() {
  { mounts_under "$STATE_DIR"; [ "$kroot_ours" = 0 ] || mounts_under "$KUBELET_ROOT"; } |
    awk '{print length($0) " " $0}' | sort -rn | cut -d' ' -f2- | uniq
}
if [ "$kroot_ours" = 0 ] && [ -n "$(mounts_under "$KUBELET_ROOT")" ]; then
  {
    log "down: $KUBELET_ROOT is not this harness's bind mount of $STATE_DIR/kubelet; leaving its mounts alone:"
    mounts_under "$KUBELET_ROOT" | sed 's/^/    mount: /'
  } >&2
fi
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

# ---- 5. loop devices backed by our files ----------------------------------------------
# Ours: backed by a file under the state dir (or our kubelet root), found by path or, when
# a pod's mount namespace attached it under another path, by inode on the state dir's
# filesystem. A filevol pod's device shows its backing file relative to that pod's mount
# of the pool ("/volumes/<volume ID>.img"); once the image is deleted no inode names it.
# It is then recognised as a filevol image on the state dir's filesystem whose directory
# exists in no host path (only in a pod), and only after a run of ours whose kubelet could
# have run pods (the stamp names its root) and when no other Kubernetes runs here: other
# filevol tests, or a real node's filevol, attach images on this filesystem too.
state_fs=$(stat -c '%d' "$STATE_DIR" 2>/dev/null || echo none)
# on_state_fs DEV_MAJ:MIN: MAJ:MIN as the kernel encodes a dev_t for stat(2) (new_encode_dev).
on_state_fs() {
  [[ $1 =~ ^[0-9]+:[0-9]+$ ]] || return 1
  local ma=${1%%:*} mi=${1##*:}
  [ "$(( (mi & 0xff) | (ma << 8) | ((mi & ~0xff) << 12) ))" = "$state_fs" ]
}
stamped_run=0
[ -z "$(owned mount)" ] || stamped_run=1
# A pod's view is relative to its mount of the pool: its first directory is no host
# directory. Another test's leaked device whose temporary directory is gone still shows
# a host path (/tmp/...): not ours.
pod_image() { # BACKING
  [ -z "$foreign" ] && [ "$stamped_run" = 1 ] &&
    [[ $1 =~ ^/(.+/)?volumes/(\.tmp-)?fv(1-[a-z]+-[0-9a-f]{8})?-[0-9a-f]{32}\.img(\ \(deleted\))?$ ]] &&
    [ ! -e "$(dirname "$1")" ] && local top=${1#/} && [ ! -e "/${top%%/*}" ]
}
# A device whose backing file the kernel can no longer stat has no device or inode to show:
# a file of a FUSE client that died (the multi-node cluster's shared pool, a node killed
# with a volume staged and revived without a reboot; LOOP_GET_STATUS64 fails with
# ENOTCONN). Its path is relative to the dead mount ("/volumes/<volume ID>.img"). It is
# ours when that path names a file of our GlusterFS volume's brick (gluster.sh: only our
# nodes' clients reach that volume, and volume IDs are random), or lies under the state
# dir; any other such device with a filevol image's name is named on stderr and left alone.
gl_brick=$STATE_DIR/gluster/brick
brick_image() { # BACKING
  [[ $1 =~ ^/(.+/)?volumes/(\.tmp-)?fv(1-[a-z]+-[0-9a-f]{8})?-[0-9a-f]{32}\.img$ ]] && [ -f "$gl_brick$1" ]
}
unidentified=()
# JSON, not columns: a device whose backing file has no device or inode to show (one another
# mount namespace set up) leaves those columns empty, and the words would shift. Fields are
# joined by \x1f, which no IFS whitespace rule collapses.
while IFS=$'\x1f' read -r dev majmin ino back; do
  case "$back" in
    "$STATE_DIR"/*) ;;
    "$KUBELET_ROOT"/*) [ "$kroot_ours" = 1 ] || continue ;;
    *) if [ -z "$majmin" ]; then
         if ! brick_image "$back"; then
           [[ ! $back =~ /fv[0-9a-z-]*[0-9a-f]{32}\.img ]] || unidentified+=("$dev $back")
           continue
         fi
       else
         on_state_fs "$majmin" || continue
         [ -n "$(find "$STATE_DIR" -xdev -inum "$ino" -print -quit 2>/dev/null)" ] || pod_image "$back" || continue
       fi ;;
  esac
  # Still the device we looked at (a number freed meanwhile may be someone else's now).
  [ "$(cat "/sys/block/${dev#/dev/}/loop/backing_file" 2>/dev/null)" = "$back" ] || continue
  [ -n "$majmin" ] || log "  $dev: its backing file cannot be stat'ed (a dead client's); ours by its path"
  # The harness's own directory pool (hack/tools/e2e/chart.sh: a btrfs it mounted with
  # -o loop) is no leak of the driver's; autoclear usually freed it at the unmount already.
  losetup -d "$dev" && log "  detached $dev ($back)" &&
    { [ "$back" = "$STATE_DIR/dir-pool.img" ] || echo "$dev $back" >> "$LOG_DIR/detached-loops.txt"; }
  did=1
done < <(losetup -J -O NAME,BACK-MAJ:MIN,BACK-INO,BACK-FILE 2>/dev/null | jq -r '.loopdevices[]? |
  [.name, ((.["back-maj:min"] // "") | gsub(" "; "")), ((.["back-ino"] // "") | tostring), (.["back-file"] // "")] | join("\u001f")' || true)
if [ ${#unidentified[@]} -gt 0 ]; then
  {
    log "down: loop devices with a filevol image's name whose backing file cannot be stat'ed (a dead"
    log "  client's file) and that nothing proves ours; left attached (losetup -d DEVICE if they are):"
    printf '    %s\n' "${unidentified[@]}"
  } >&2
fi

# ---- 6. bridge, address, iptables, cgroups, state ------------------------------------
# Sandboxes whose CNI DEL never ran (killed runs) leave libcni cache entries keyed by id.
ids=$(ls "$STATE_DIR"/containerd/{root,state}/io.containerd.grpc.v1.cri/sandboxes "$TASKS"/* 2>/dev/null | grep -xE '[0-9a-f]{64}' | sort -u || true)
for id in $ids; do rm -f /var/lib/cni/results/*-"$id"-*; done
for l in $(owned link); do
  if ip link show "$l" >/dev/null 2>&1; then ip link del "$l"; log "  deleted bridge $l"; did=1; fi
done
# (Tests on captured output, not `| grep -q`: with pipefail, grep quitting early can fail
# the pipeline.)
while read -r a d; do
  if [[ $(ip -o addr show dev "$d" 2>/dev/null) == *" $a "* ]]; then
    ip addr del "$a" dev "$d"; log "  removed address $a from $d"; did=1
  fi
done < <(owned addr)
# The kubelet creates these chains and the KUBE-FIREWALL jumps, and never removes them. The
# stamp names those that did not exist before our kubelet; while another kubelet or a
# kube-proxy runs, they may be its too, and stay (in the stamp, for a later down.sh).
chains_left=0
if [ -n "$(owned chain)" ] && grep -qE '^(kubelet|kube-proxy) ' <<<"$foreign"; then
  chains_left=1
  log "down: leaving the iptables chains our kubelet made, since a kubelet or kube-proxy we did not start may use them too: $(owned chain | awk '{print $1 "/" $2 "/" $3}' | tr '\n' ' ')" >&2
else
  while read -r ipt table chain; do
    [ -n "$chain" ] && command -v "$ipt" >/dev/null || continue
    if [ "$table $chain" = "filter KUBE-FIREWALL" ]; then
      for from in INPUT OUTPUT; do
        while $ipt -w -t filter -C $from -j KUBE-FIREWALL 2>/dev/null; do $ipt -w -t filter -D $from -j KUBE-FIREWALL; did=1; done
      done
    fi
    if $ipt -w -t "$table" -nL "$chain" >/dev/null 2>&1; then
      $ipt -w -t "$table" -F "$chain" && $ipt -w -t "$table" -X "$chain" && did=1
    fi
  done < <(owned chain)
fi
for c in $our_cgroups; do
  if cgroup_dir "$c"; then find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null || true; did=1; fi
done
rm -f "$STATE_DIR/kubelet-config.yaml"
# keep whatever container logs are left, next to the cluster logs
if [ -n "$(ls -A "$STATE_DIR/pod-logs" 2>/dev/null)" ]; then
  mkdir -p "$LOG_DIR/cluster" && cp -a "$STATE_DIR/pod-logs" "$LOG_DIR/cluster/" 2>/dev/null || true
fi
for d in etcd containerd kubelet cni pod-logs ssh; do
  [ -e "$STATE_DIR/$d" ] && rm -rf --one-file-system "${STATE_DIR:?}/$d"
done

# ---- 7. hard-coded paths outside the state dir, only what we created ----------------
if [ -d /var/log/containers ]; then                              # kubelet's log symlinks to our pod logs
  find /var/log/containers -maxdepth 1 -type l -lname "$STATE_DIR/pod-logs/*" -delete 2>/dev/null || true
fi
# libcni's cache of our network (and of the sandbox ids above), when a run of ours left it
if [ -s "$OWNED" ]; then rm -f /var/lib/cni/results/filevol-e2e-* 2>/dev/null || true; fi
# A killed shim leaves its socket; remove those of our shims that nobody listens on.
listening=$(ss -xlnH 2>/dev/null | awk '{print $5}' || true)
for s in "${shim_socks[@]}"; do
  if [ -S "$s" ] && ! grep -qxF "$s" <<<"$listening"; then rm -f "$s"; fi
done
# Directories that were absent before up.sh (our KUBELET_ROOT mount point among them),
# deepest first, and only once empty.
for d in $(owned dir | awk '{print length($0) " " $0}' | sort -rn | cut -d' ' -f2-); do
  rmdir "$d" 2>/dev/null || true
done
if [ "$chains_left" = 1 ]; then
  owned chain | sed 's/^/chain /' > "$OWNED.tmp" && mv -f "$OWNED.tmp" "$OWNED"
else
  rm -f "$OWNED"
fi

if [ "$did" = 1 ]; then log "down: cluster is down"; else log "down: nothing to do"; fi
