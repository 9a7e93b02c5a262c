#!/usr/bin/env bash
# killed-run.sh: `make e2e-multinode` killed half-way, and the next run's clean-up proved
# complete (make e2e-multinode-killed; root).
#
#   1. run.sh (MN_SKIP_BUILD=1: the last build's binaries; MN_STOP_AFTER=install; logs in
#      _output/e2e-multinode-killed) in a session and process group of its own;
#   2. once it says the extra nodes, the GlusterFS server and clients (over TLS, mounted
#      once filevol installed their certificates), the directory pool's btrfs and filevol
#      are up, SIGKILL to its whole process group: run.sh and its children
#      die with no trap run; what they started in sessions of their own (the nodes'
#      holders, kubelets, containerds, forwarders, glusterd, the control plane) lives on,
#      with every mount, namespace, veth, cgroup and loop device;
#   3. clean.sh with FILEVOL_E2E_GRACEFUL=0: what the next run.sh runs first;
#   4. nothing may be left: no process of the run (recorded, in a filevol-e2e cgroup, or
#      naming the state dir or the node network on its command line), no bridge
#      fve2e-nodes or filevol-e2e0 or veth fve-*, no filevol-e2e* cgroup, no mount under
#      the state dir or our kubelet root (namespace pins included), no loop device backed
#      by a file under the state dir, none of the run's directories. Exit 1 naming each.
#
# Holds $STATE_DIR/run.lock (or the caller does: FILEVOL_E2E_LOCK_HELD=1).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../cluster/lib.sh"
[ "$(id -u)" = 0 ] || die "killed-run.sh must run as root"
OUT=$REPO_ROOT/_output/e2e-multinode-killed
mkdir -p "$OUT" "$STATE_DIR"
[ -x "$REPO_ROOT/_output/e2e-multinode/bin/multinode.test" ] || die "no build: MN_BUILD_ONLY=1 test/e2e/multinode/run.sh first"
exec 8>"$STATE_DIR/run.lock"
if [ "${FILEVOL_E2E_LOCK_HELD:-0}" != 1 ] && ! flock -n 8; then
  log "killed-run: another e2e run is using $STATE_DIR; waiting for it to end"
  flock 8
fi
T0=$(date +%s)

# ---- 1, 2: the run, killed once everything it makes outside the cluster is up -------------
: > "$OUT/run.log"
setsid env MN_SKIP_BUILD=1 MN_STOP_AFTER=install MN_OUT="$OUT/run" FILEVOL_E2E_LOCK_HELD=1 \
  "$HERE/run.sh" > "$OUT/run.log" 2>&1 < /dev/null 8>&- &
pg=$!
for ((i = 0; i < 600; i++)); do
  grep -q 'MN_STOP_AFTER=install' "$OUT/run.log" && break
  kill -0 "$pg" 2>/dev/null || die "run.sh ended before it was killed: $(tail -20 "$OUT/run.log")"
  sleep 1
done
grep -q 'MN_STOP_AFTER=install' "$OUT/run.log" || { kill -KILL -- "-$pg"; die "run.sh not up after 600 s: $(tail -20 "$OUT/run.log")"; }
up=$(( $(date +%s) - T0 ))
kill -KILL -- "-$pg"
wait "$pg" 2>/dev/null || true
log "killed-run: run.sh's process group $pg killed ${up}s in (nodes, GlusterFS, directory pool up); left running:"
left_procs=$(awk '{print $1 "=" $2}' "$STATE_DIR/pids" 2>/dev/null | tr '\n' ' ')
log "  recorded: $left_procs"
[ -n "$left_procs" ] || die "nothing recorded in $STATE_DIR/pids: the kill came before the run started anything"

# ---- 3: the next run's clean-up ------------------------------------------------------------
t=$(date +%s)
FILEVOL_E2E_GRACEFUL=0 "$HERE/clean.sh" > "$OUT/clean.log" 2>&1 || die "clean.sh failed: $(tail -20 "$OUT/clean.log")"
clean=$(( $(date +%s) - t ))

# ---- 4: nothing left -----------------------------------------------------------------------
leaks=()
leak() { leaks+=("$*"); log "  LEAK: $*"; }
sleep 0.5  # PID 1 reaps the last killed processes
for d in /proc/[0-9]*; do
  p=${d#/proc/}
  [ "$p" = $$ ] && continue
  # (The redirections inside braces: a process that ended meanwhile is no error.)
  cmd=$({ tr '\0' ' ' < "$d/cmdline"; } 2>/dev/null) || continue
  [ -n "$cmd" ] || continue
  st=$({ cat "$d/stat"; } 2>/dev/null) || continue; st=${st##*) }
  [ "${st:0:1}" = Z ] && continue
  case "$cmd" in
    *"$STATE_DIR/run.lock"*) ;;  # whoever holds the lock (flock(1), this script's callers)
    *"$STATE_DIR/"*|*10.89.1.*|*"$CONTAINERD_SOCK"*) leak "process $p: ${cmd:0:160}" ;;
  esac
  grep -q ':/filevol-e2e' "$d/cgroup" 2>/dev/null && leak "process $p in a filevol-e2e cgroup: ${cmd:0:160}"
done
for l in fve2e-nodes "$BRIDGE" $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep '^fve-' || true); do
  ip link show "$l" >/dev/null 2>&1 && leak "link $l"
done
for c in "$CGROUP_FS"/filevol-e2e* "$CGROUP_FS"/*/filevol-e2e*; do [ -e "$c" ] && leak "cgroup $c"; done
for m in $(mounts_under "$STATE_DIR") $(mounts_under "$KUBELET_ROOT"); do leak "mount $m"; done
while read -r dev back; do
  case "$back" in "$STATE_DIR"/*) leak "loop device $dev on $back" ;; esac
done < <(losetup -n -O NAME,BACK-FILE 2>/dev/null || true)
for d in nodes gluster shared-pool shared-pool-tls pool dir-pool dir-pool.img etcd containerd kubelet cni pids; do
  [ -e "$STATE_DIR/$d" ] && leak "$STATE_DIR/$d"
done
log "killed-run: up ${up}s, clean-up ${clean}s, total $(( $(date +%s) - T0 ))s; ${#leaks[@]} left"
[ "${#leaks[@]}" = 0 ] || die "the clean-up after a killed run left ${#leaks[@]} thing(s) (above; clean.sh's log: $OUT/clean.log)"
log "killed-run: nothing left"
