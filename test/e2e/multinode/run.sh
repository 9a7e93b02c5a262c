#!/usr/bin/env bash
# make e2e-multinode: filevol on a real three-node Kubernetes on this machine.
#
#   1. build (cached): cluster binaries, bin/filevol, images, the stories test binary;
#   1b. with MN_KILLED_RUN=1 (make e2e-multinode-killed runs it alone), killed-run.sh (67 s on a
#      quiet machine, 353 s under a load of 20): a run of this script SIGKILLed
#      once its nodes, GlusterFS and directory pool are up, and the clean-up the next run
#      does (clean.sh) proved to leave nothing;
#   2. up.sh (FILEVOL_E2E_MULTINODE=1): control plane and node vm; its pool is a tmpfs of
#      MN_POOL_VM MiB on the host; node.sh up n2 / n3: nodes in namespaces of their own,
#      pools of MN_POOL_N2 / MN_POOL_N3 MiB; a zone label per node;
#   3. helm install (values-e2e.yaml + values.yaml here): node DaemonSet on all three
#      nodes, controller Deployment (2 replicas, leader election);
#   4. the stories (go test -tags e2e ./test/e2e/multinode), logs in _output/e2e-multinode;
#   5. clean.sh, always (down.sh, which takes the nodes down first, and the run's directories).
#
# Holds $STATE_DIR/run.lock throughout (the single-node run.sh takes the same lock).
# Knobs: MN_RUN=regexp (go test -run); MN_BUILD_ONLY=1 (step 1 only), MN_SKIP_BUILD=1 (use what
# the last build left); FILEVOL_E2E_LOCK_HELD=1 (the caller holds the lock: several runs in a row
# under one `flock $STATE_DIR/run.lock`); MN_HOLD=FILE (debugging: keep the cluster and the lock
# until FILE exists, then tear down); MN_KEEP=1 (leave the cluster up; make cluster-down);
# MN_KILLED_RUN=1 (step 1b); MN_OUT=DIR (logs elsewhere than _output/e2e-multinode: killed-run.sh's run); MN_STOP_AFTER=dir-pool
# (stop once the directory pool is mounted on every node, before the install: killed-run.sh).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../cluster/lib.sh"
[ "$(id -u)" = 0 ] || die "run.sh must run as root"
OUT=${MN_OUT:-$REPO_ROOT/_output/e2e-multinode}
# The cluster's logs go with this run's, not over the single-node run's.
export FILEVOL_E2E_LOGS=$OUT
LOG_DIR=$OUT
MN_POOL_VM=${MN_POOL_VM:-1536} MN_POOL_N2=${MN_POOL_N2:-512} MN_POOL_N3=${MN_POOL_N3:-1024}
NODES=("n2 10.89.1.2 zone-b $MN_POOL_N2" "n3 10.89.1.3 zone-c $MN_POOL_N3")
POOL=$STATE_DIR/pool
# gluster.sh's server address and volume, and where every node mounts it (values.yaml).
GL_IP=10.89.1.250 GL_VOL=fvmn SHARED_POOL=$STATE_DIR/shared-pool
# The directory pool (values.yaml sharedPool.dirPool): a btrfs in this file, mounted here.
DIR_POOL=$STATE_DIR/dir-pool
K=("$KUBECTL" --kubeconfig "$ADMIN_KUBECONFIG")
T0=$(date +%s)
since() { echo $(( $(date +%s) - T0 )); }
SUMMARY=()
note() { SUMMARY+=("$*"); log "$*"; }

mkdir -p "$OUT/bin"

finish() {
  local rc=$?
  set +e
  trap - EXIT INT TERM
  if [ -n "$CHILD" ] && kill -0 "$CHILD" 2>/dev/null; then kill -TERM "$CHILD"; wait "$CHILD"; fi
  # Before the lock (the builds), the cluster on this state dir is someone else's: touch nothing.
  if [ -z "${TL:-}" ]; then
    note "total: $(since)s, exit $rc (before the cluster)"
    exit "$rc"
  fi
  # The filevol pods' logs, from each node's kubelet log directory (down.sh removes them).
  mkdir -p "$OUT/driver"
  for d in "$STATE_DIR/pod-logs" "$STATE_DIR"/nodes/*/pod-logs; do
    compgen -G "$d/filevol_*" >/dev/null || continue
    n=vm; [[ $d == */nodes/* ]] && n=$(basename "$(dirname "$d")")
    mkdir -p "$OUT/driver/$n" && cp -r "$d"/filevol_* "$OUT/driver/$n/"
  done
  if [ -n "${MN_HOLD:-}" ]; then
    # Debugging: keep the cluster (and the lock) until the file MN_HOLD exists (30 min at most).
    log "MN_HOLD: the cluster stays up until $MN_HOLD exists (KUBECONFIG=$ADMIN_KUBECONFIG)"
    for ((i = 0; i < 1800; i++)); do [ -e "$MN_HOLD" ] && break; sleep 1; done
  fi
  if [ "${MN_KEEP:-0}" = 1 ]; then
    log "MN_KEEP=1: the cluster stays up (KUBECONFIG=$ADMIN_KUBECONFIG); make cluster-down when done"
  else
    local t=$(date +%s)
    "$HERE/clean.sh"
    note "cluster-down: $(( $(date +%s) - t ))s"
    if [ -s "$OUT/detached-loops.txt" ]; then
      note "LEAK: $(wc -l < "$OUT/detached-loops.txt") loop device(s) left attached: $(tr '\n' ';' < "$OUT/detached-loops.txt")"
      [ "$rc" != 0 ] || rc=1
    fi
  fi
  note "total: $(since)s (with the lock: $(( $(date +%s) - ${TL:-$(date +%s)} ))s), exit $rc"
  printf '%s\n' "${SUMMARY[@]}" > "$OUT/summary.txt"
  echo "==== e2e-multinode summary (also in $OUT/summary.txt)"; printf '  %s\n' "${SUMMARY[@]}"
  exit "$rc"
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- 1. build ------------------------------------------------------------------------------
if [ "${MN_SKIP_BUILD:-0}" != 1 ]; then
"$CLUSTER_DIR/install-packages.sh" >/dev/null
"$CLUSTER_DIR/build.sh" >/dev/null
make -C "$REPO_ROOT" --no-print-directory build >/dev/null
(cd "$REPO_ROOT" && go test -c -tags e2e -o "$OUT/bin/multinode.test" ./test/e2e/multinode)
"$REPO_ROOT/hack/images.sh" "$REPO_ROOT/_output/images" > "$OUT/images.log" 2>&1 || die "hack/images.sh failed: $(tail -20 "$OUT/images.log")"
note "build: $(since)s"
fi
[ "${MN_BUILD_ONLY:-0}" != 1 ] || exit 0

# The lock from here to the end (the cluster's whole life); the builds above need none.
mkdir -p "$STATE_DIR"
exec 8>"$STATE_DIR/run.lock"
if [ "${FILEVOL_E2E_LOCK_HELD:-0}" = 1 ]; then
  log "e2e-multinode: FILEVOL_E2E_LOCK_HELD=1: the caller holds $STATE_DIR/run.lock"
elif ! flock -n 8; then
  log "e2e-multinode: another e2e run is using $STATE_DIR; waiting for it to end"
  flock 8
fi
TL=$(date +%s)
# The last run's logs to prev/, once the lock is ours: a run waiting for it must not move the
# logs of the run that holds it.
rm -rf "$OUT/prev"; mkdir -p "$OUT/prev"
for f in stories.log summary.txt install.log killed-run.log driver cluster; do [ -e "$OUT/$f" ] && mv "$OUT/$f" "$OUT/prev/"; done

# ---- 1b. a killed run, and its clean-up proved complete ------------------------------------
# Not in killed-run.sh's own run of this script (MN_STOP_AFTER), which it kills.
if [ "${MN_KILLED_RUN:-0}" = 1 ] && [ -z "${MN_STOP_AFTER:-}" ]; then
  t=$(date +%s)
  FILEVOL_E2E_LOCK_HELD=1 fg "$HERE/killed-run.sh" > "$OUT/killed-run.log" 2>&1 ||
    die "killed-run.sh: the clean-up after a killed run left something: $(tail -n 15 "$OUT/killed-run.log")"
  note "killed run cleaned, nothing left: $(( $(date +%s) - t ))s ($(grep -o 'killed [0-9]*s in' "$OUT/killed-run.log"))"
fi

# ---- 2. cluster ----------------------------------------------------------------------------
t=$(date +%s)
# What a killed run left (the next run's clean-up; killed-run.sh proves it complete).
FILEVOL_E2E_GRACEFUL=0 fg "$HERE/clean.sh"
rm -f "$OUT/detached-loops.txt"
FILEVOL_E2E_MULTINODE=1 fg "$CLUSTER_DIR/up.sh"
# vm's pool: a tmpfs of its own size on the host (under the state dir: down.sh unmounts it).
mkdir -p "$POOL"
mount -t tmpfs -o size="${MN_POOL_VM}m",mode=0700 fve2e-pool-vm "$POOL"
while read -r tar _; do
  ctr --address "$CONTAINERD_SOCK" -n k8s.io images import "$REPO_ROOT/_output/images/$tar" >/dev/null
done < "$REPO_ROOT/_output/images/images.txt"
"${K[@]}" label node "$NODE_NAME" topology.kubernetes.io/zone=zone-a --overwrite >/dev/null
for spec in "${NODES[@]}"; do
  # shellcheck disable=SC2086
  fg "$CLUSTER_DIR/node.sh" up $spec
done
# The shared pool: one GlusterFS volume (gluster.sh), mounted by every node's own client.
fg "$HERE/gluster.sh" up
fg "$HERE/gluster.sh" mount-vm
for spec in "${NODES[@]}"; do
  fg "$CLUSTER_DIR/node.sh" pool-client "${spec%% *}" "$GL_IP" "$GL_VOL" "$SHARED_POOL"
done
# The directory pool: directory volumes (ReadWriteMany) enforce their size with btrfs
# qgroups, and GlusterFS has none. One btrfs (a sparse file, loop-mounted here: vm) mounted
# from the same device in n2's and n3's mount namespaces (their copies of the host's mounts
# were dropped at their creation): one filesystem at the same path on every node, standing
# in for a shared filesystem with per-directory quotas (README "Extra nodes"). clean.sh:
# down.sh unmounts it (under the state dir) and detaches the device (backed there); the
# nodes' mounts go with their namespaces.
truncate -s 2G "$DIR_POOL.img"
mkfs.btrfs -q -f "$DIR_POOL.img" >/dev/null
mkdir -p "$DIR_POOL"
mount -o loop "$DIR_POOL.img" "$DIR_POOL"
dev=$(findmnt -n -o SOURCE --target "$DIR_POOL")
for spec in "${NODES[@]}"; do fg "$CLUSTER_DIR/node.sh" mount "${spec%% *}" "$dev" "$DIR_POOL" btrfs; done
log "dir pool: btrfs on $dev ($DIR_POOL.img) at $DIR_POOL on vm, ${NODES[*]%% *}"
if [ "${MN_STOP_AFTER:-}" = dir-pool ]; then
  log "MN_STOP_AFTER=dir-pool: the nodes, GlusterFS and the directory pool are up"
  sleep infinity & wait $!
fi
for spec in "${NODES[@]}"; do
  n=${spec%% *}
  for i in $(seq 60); do "${K[@]}" get node "$n" >/dev/null 2>&1 && break; sleep 1; done
  "${K[@]}" wait --for=condition=Ready "node/$n" --timeout=120s >/dev/null || die "node $n not Ready"
done
note "cluster-up (3 nodes Ready): $(( $(date +%s) - t ))s"

# ---- 3. filevol ----------------------------------------------------------------------------
t=$(date +%s)
CHART_SH=$REPO_ROOT/hack/tools/e2e/chart.sh
fg "$CHART_SH" helm upgrade --install filevol "$REPO_ROOT/charts/filevol" --namespace filevol --create-namespace \
  -f "$REPO_ROOT/hack/tools/e2e/values-e2e.yaml" -f "$HERE/values.yaml" --wait --timeout 5m > "$OUT/install.log" 2>&1 ||
  die "helm install failed: $(tail -n 30 "$OUT/install.log")"
for i in $(seq 120); do
  regs=$("${K[@]}" get csinode -o jsonpath='{range .items[*]}{.metadata.name}={.spec.drivers[*].name}{"\n"}{end}' | grep -c 'filevol.csi.io.*shared.filevol.csi.io\|shared.filevol.csi.io.*filevol.csi.io' || true)
  [ "$regs" = 3 ] && break
  sleep 1
done
[ "$regs" = 3 ] || die "filevol and shared.filevol.csi.io registered on $regs of 3 nodes: $("${K[@]}" get csinode -o wide)"
note "install: $(( $(date +%s) - t ))s; $("${K[@]}" -n filevol get pods -o wide --no-headers | awk '{print $1 "@" $7}' | tr '\n' ' ')"

# ---- 4. stories ----------------------------------------------------------------------------
t=$(date +%s)
rc=0
fg env FILEVOL_E2E_KUBECONFIG="$ADMIN_KUBECONFIG" FILEVOL_E2E_IMAGE="$BUSYBOX_TAG" \
  FILEVOL_E2E_NODE_SH="$CLUSTER_DIR/node.sh" FILEVOL_E2E_KUBECTL="$KUBECTL" FILEVOL_E2E_KUBECTL_FILEVOL="$REPO_ROOT/bin/kubectl-filevol" \
  FILEVOL_E2E_POOL_MIB="vm=$MN_POOL_VM,n2=$MN_POOL_N2,n3=$MN_POOL_N3" FILEVOL_E2E_GLUSTER_BRICK="$STATE_DIR/gluster/brick" \
  FILEVOL_E2E_DIR_POOL="$DIR_POOL" FILEVOL_E2E_STATE="$STATE_DIR" \
  "$OUT/bin/multinode.test" -test.v -test.timeout 20m ${MN_RUN:+-test.run "$MN_RUN"} > "$OUT/stories.log" 2>&1 || rc=$?
lines=$(grep -E '^--- (PASS|FAIL|SKIP)' "$OUT/stories.log" || true)
note "stories: $(( $(date +%s) - t ))s, $(grep -c '^--- PASS' <<<"$lines" || true) passed, $(grep -c '^--- FAIL' <<<"$lines" || true) failed (exit $rc, $OUT/stories.log)"
grep -E '^--- (FAIL|SKIP)' <<<"$lines" | sed 's/^/  /' || true
[ "$rc" = 0 ] || die "stories failed"
