#!/usr/bin/env bash
# Deploy filevol on the running e2e cluster as a node-local driver, all as host
# processes (the cluster has no kube-proxy, so nothing in a pod could reach the
# apiserver): filevol (--mode all, registers itself with the kubelet), and the
# sidecars a node-local deployment runs next to it, each under supervise.sh, which
# restarts it when it exits as the kubelet would restart its container:
#   csi-provisioner --node-deployment --enable-capacity --extra-create-metadata
#   csi-snapshotter with leader election     (only when the driver advertises snapshots)
#   csi-resizer with leader election         (only when it advertises expansion)
# then the CSIDriver object, the StorageClasses and the VolumeSnapshotClass, and waits
# until the node's CSINode lists the driver. Every process is recorded with
# record_pid, so test/e2e/cluster/down.sh stops it by PID.
#
#   deploy.sh up               everything above (the cluster must be up)
#   deploy.sh restart-driver   SIGTERM filevol, wait for it to exit, start it again
#   deploy.sh stop-driver | start-driver
#
# Logs: _output/e2e/driver/*.log. The pool is $FILEVOL_E2E_STATE/filevol/pool, so the
# cluster's down.sh detaches its loop devices like every other e2e leftover.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/cluster/lib.sh"
[ "$(id -u)" = 0 ] || die "deploy.sh must run as root"

E2E_DIR=$REPO_ROOT/test/e2e
DRIVER=filevol.csi.io
SOCK=$KUBELET_ROOT/plugins/$DRIVER/csi.sock
ENDPOINT=unix://$SOCK
HEALTH=127.0.0.1:9808
FV_STATE=$STATE_DIR/filevol
POOL=$FV_STATE/pool
DLOGS=$LOG_DIR/driver
FILEVOL_BIN=${FILEVOL_BIN:-$REPO_ROOT/bin/filevol}
CAPPROBE=${CAPPROBE:-$LOG_DIR/bin/capprobe}
SIDECAR_V=${FILEVOL_E2E_SIDECAR_V:-4}
export KUBECONFIG=$ADMIN_KUBECONFIG
mkdir -p "$DLOGS"

# alive PID: running, and not a zombie (PID 1 reaps orphans slowly here).
alive() { [ -r "/proc/$1/stat" ] && [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]; }
# recorded_pid NAME: the newest recorded process called NAME, if it is still ours and alive.
recorded_pid() {
  [ -s "$PIDS_FILE" ] || return 1
  local n p st
  while read -r n p st; do
    if [ "$n" = "$1" ] && [ "$(proc_start "$p" 2>/dev/null)" = "$st" ] && alive "$p"; then echo "$p"; return 0; fi
  done < <(tac "$PIDS_FILE")
  return 1
}
start() { # name command... (its own session, log appended: a restarted driver keeps one log)
  local n=$1; shift
  echo "==== $(date -u +%FT%T.%NZ) start: $*" >> "$DLOGS/$n.log"
  setsid "$@" >> "$DLOGS/$n.log" 2>&1 < /dev/null 8>&- &   # 8: run.sh's lock
  local p=$!
  record_pid "$n" "$p"
  log "started $n (pid $p)"
}
# sidecar NAME COMMAND...: start under supervise.sh, which restarts it whenever it exits.
sidecar() { local n=$1; shift; start "$n" "$E2E_DIR/supervise.sh" "$@"; }
alive_or_die() { # name pid
  alive "$2" || die "$1 (pid $2) exited; see $DLOGS/$1.log:
$(tail -n 20 "$DLOGS/$1.log")"
}

start_driver() {
  [ -x "$FILEVOL_BIN" ] || die "$FILEVOL_BIN missing: make build"
  if recorded_pid filevol >/dev/null; then die "filevol is already running (pid $(recorded_pid filevol))"; fi
  if ss -ltnH "sport = :${HEALTH##*:}" | grep -q .; then
    die "port ${HEALTH##*:} is in use by a process this script did not start: $(ss -ltnpH "sport = :${HEALTH##*:}")"
  fi
  mkdir -p "$FV_STATE"
  start filevol "$FILEVOL_BIN" --mode all --endpoint "$ENDPOINT" \
    --registration-dir "$KUBELET_ROOT/plugins_registry" --kubelet-dir "$KUBELET_ROOT" \
    --pool-dir "$POOL" --node-id "$NODE_NAME" --http-endpoint "$HEALTH" --v "${FILEVOL_E2E_V:-4}"
  local p i
  p=$(recorded_pid filevol)
  # /healthz is 200 once the pool is usable and the kubelet has accepted the registration.
  for ((i = 0; i < 240; i++)); do
    curl -sf "http://$HEALTH/healthz" >/dev/null 2>&1 && { log "filevol healthy"; return 0; }
    alive_or_die filevol "$p"
    sleep 0.25
  done
  die "filevol not healthy after 60s: $(curl -s "http://$HEALTH/healthz" || true)"
}

stop_driver() {
  local p i
  p=$(recorded_pid filevol) || { log "filevol is not running"; return 0; }
  kill -TERM "$p"
  # SIGTERM: stop accepting, finish in-flight calls (30 s at most), remove the socket, exit 0.
  for ((i = 0; i < 400; i++)); do alive "$p" || break; sleep 0.1; done
  if alive "$p"; then die "filevol (pid $p) still running 40s after SIGTERM"; fi
  log "stopped filevol (pid $p)"
}

up() {
  for b in csi-provisioner csi-snapshotter csi-resizer; do [ -x "$BIN_DIR/$b" ] || die "$BIN_DIR/$b missing: run build.sh"; done
  [ -x "$CAPPROBE" ] || die "$CAPPROBE missing (run.sh builds it: go build -o $CAPPROBE ./test/e2e/capprobe)"
  "$KUBECTL" get --raw /readyz >/dev/null 2>&1 || die "the e2e cluster is not up (make cluster-up)"
  start_driver

  # What the driver advertises decides which sidecars run and which suite tests are on.
  "$CAPPROBE" -endpoint "$ENDPOINT" > "$LOG_DIR/capabilities.txt"
  "$CAPPROBE" -endpoint "$ENDPOINT" -template "$E2E_DIR/testdriver.yaml" -out "$LOG_DIR/testdriver.yaml" |
    sed 's/^/  capability /'
  has() { grep -qx "$1" "$LOG_DIR/capabilities.txt"; }

  # --node-deployment: this provisioner handles only PVCs whose selected node is this one
  # (no leader election: one provisioner per node). --enable-capacity publishes
  # CSIStorageCapacity for this node's topology segment; outside a pod there is no owner
  # for those objects, hence --capacity-ownerref-level=-1.
  sidecar csi-provisioner env NODE_NAME="$NODE_NAME" NAMESPACE=kube-system "$BIN_DIR/csi-provisioner" \
    --csi-address="$SOCK" --kubeconfig="$ADMIN_KUBECONFIG" \
    --node-deployment --enable-capacity --capacity-ownerref-level=-1 --extra-create-metadata \
    --timeout=60s --v="$SIDECAR_V"
  local sidecars=(csi-provisioner)
  if has controller:CREATE_DELETE_SNAPSHOT; then
    # One snapshotter with leader election. (--node-deployment, one per node, would also need
    # snapshot-controller --enable-distributed-snapshotting, and it ignores pre-provisioned
    # VolumeSnapshotContents that lack the snapshot.storage.kubernetes.io/managed-by label.)
    sidecar csi-snapshotter "$BIN_DIR/csi-snapshotter" \
      --csi-address="$SOCK" --kubeconfig="$ADMIN_KUBECONFIG" \
      --leader-election --leader-election-namespace=kube-system \
      --timeout=60s --v="$SIDECAR_V"
    sidecars+=(csi-snapshotter)
  else
    log "csi-snapshotter not started: the driver does not advertise CREATE_DELETE_SNAPSHOT"
  fi
  if has controller:EXPAND_VOLUME || has node:EXPAND_VOLUME; then
    sidecar csi-resizer "$BIN_DIR/csi-resizer" \
      --csi-address="$SOCK" --kubeconfig="$ADMIN_KUBECONFIG" \
      --leader-election --leader-election-namespace=kube-system \
      --timeout=60s --v="$SIDECAR_V"
    sidecars+=(csi-resizer)
  else
    log "csi-resizer not started: the driver advertises no EXPAND_VOLUME"
  fi

  "$KUBECTL" apply -f "$E2E_DIR/manifests/filevol.yaml" >/dev/null
  "$KUBECTL" apply -f "$E2E_DIR/manifests/snapshotclass.yaml" >/dev/null
  log "applied CSIDriver $DRIVER, StorageClasses filevol and filevol-xfs, VolumeSnapshotClass filevol"

  local i n
  for ((i = 0; i < 240; i++)); do
    if "$KUBECTL" get csinode "$NODE_NAME" -o jsonpath='{.spec.drivers[*].name}' 2>/dev/null | grep -qw "$DRIVER"; then
      break
    fi
    alive_or_die filevol "$(recorded_pid filevol)"
    sleep 0.25
  done
  [ "$i" -lt 240 ] || die "CSINode $NODE_NAME does not list $DRIVER after 60s"
  log "CSINode $NODE_NAME lists $DRIVER (topology key: $("$KUBECTL" get csinode "$NODE_NAME" \
    -o jsonpath="{.spec.drivers[?(@.name=='$DRIVER')].topologyKeys}"))"
  # The provisioner publishes capacity once it has talked to the driver: a sign it is working.
  for ((i = 0; i < 240; i++)); do
    n=$("$KUBECTL" get csistoragecapacities -n kube-system -o name 2>/dev/null | wc -l)
    [ "$n" -ge 2 ] && break
    for s in "${sidecars[@]}"; do alive_or_die "$s" "$(recorded_pid "$s" || echo 0)"; done
    sleep 0.25
  done
  [ "$n" -ge 2 ] || die "csi-provisioner published no CSIStorageCapacity after 60s (see $DLOGS/csi-provisioner.log)"
  for s in "${sidecars[@]}"; do alive_or_die "$s" "$(recorded_pid "$s" || echo 0)"; done
  log "filevol deployed: ${sidecars[*]} running, $n CSIStorageCapacity objects"
}

case "${1:-}" in
  up) up ;;
  start-driver) start_driver ;;
  stop-driver) stop_driver ;;
  restart-driver) stop_driver; start_driver ;;
  *) echo "usage: $0 up|start-driver|stop-driver|restart-driver" >&2; exit 2 ;;
esac
