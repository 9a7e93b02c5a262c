#!/usr/bin/env bash
# hack/tools/e2e/chart.sh COMMAND: filevol installed from charts/filevol on the
# project's e2e cluster (run `make cluster-up` first). Needs root.
#
#   images      hack/images.sh, then import every tarball into the cluster's containerd
#   install     images, then `helm upgrade --install filevol charts/filevol -n filevol
#               -f values-e2e.yaml --wait` and a check that kubelet registered the driver
#               (FILEVOL_E2E_SKIP_IMAGES=1: the images are already imported)
#   uninstall   `helm uninstall --wait`, then fail if anything of the release is left
#               (pods, RBAC, CSIDriver, StorageClasses, CSIStorageCapacities)
#   restart-driver  delete the node pod (filevol gets SIGTERM), wait until the DaemonSet's
#               new pod is Ready and kubelet lists the drivers again
#   stop-node   the DaemonSet stops selecting the node (a nodeSelector no node matches):
#               its pod, both filevol node plugins in it, goes away; kubelet unregisters them
#   start-node  the DaemonSet selects the node again; wait until its pod is Ready and
#               kubelet lists the drivers again
#   helm ARGS   the project's helm (built from hack/tools at the pinned SDK version)
#   kubectl ARGS
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
# shellcheck source=/dev/null
source "$ROOT/test/e2e/cluster/lib.sh"   # BIN_DIR, CONTAINERD_SOCK, ADMIN_KUBECONFIG, log, die
export KUBECONFIG=${KUBECONFIG:-$ADMIN_KUBECONFIG}
RELEASE=filevol NS=filevol DRIVER=filevol.csi.io SHARED_DRIVER=shared.filevol.csi.io
# values-e2e.yaml's sharedPool.hostPath: the chart wants it to exist (a shared
# filesystem's mount point), so install makes it.
SHARED_POOL=/var/lib/filevol-e2e/shared-pool
# values-e2e.yaml's sharedPool.dirPool.hostPath: directory volumes enforce sizes with
# btrfs qgroups, so it is a btrfs in a file under the cluster's state directory. down.sh
# unmounts everything there and detaches loop devices backed there; `mount -o loop`
# sets autoclear, so the unmount usually frees the device already.
DIR_POOL=/var/lib/filevol-e2e/dir-pool
# stop-node's label: no node has it.
STOPPED_LABEL=filevol.csi.io/e2e-stopped
HELM=$ROOT/_output/tools/helm
K=("$BIN_DIR/kubectl")

build_helm() {
  local v; v=$(cd "$ROOT/hack/tools" && go list -m -f '{{.Version}}' helm.sh/helm/v3)
  # The k8s version ldflags are what helm's own Makefile sets (client-go v0.37).
  (cd "$ROOT/hack/tools" && CGO_ENABLED=0 go build -o "$HELM" -ldflags "-s -w \
    -X helm.sh/helm/v3/internal/version.version=$v \
    -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=37" \
    helm.sh/helm/v3/cmd/helm)
}

images() {
  "$ROOT/hack/images.sh" "$ROOT/_output/images"
  local tar names
  while read -r tar names; do
    ctr --address "$CONTAINERD_SOCK" -n k8s.io images import "$ROOT/_output/images/$tar" >/dev/null
    log "imported $names"
  done < "$ROOT/_output/images/images.txt"
}

install() {
  [ "${FILEVOL_E2E_SKIP_IMAGES:-}" = 1 ] || images
  build_helm
  mkdir -p "$SHARED_POOL"
  dir_pool
  "$HELM" upgrade --install "$RELEASE" "$ROOT/charts/filevol" --namespace "$NS" --create-namespace \
    -f "$HERE/values-e2e.yaml" --wait --timeout 5m "$@"
  local i
  for i in $(seq 60); do
    registered && break
    sleep 1
  done
  registered || die "kubelet did not register $DRIVER and $SHARED_DRIVER: $("${K[@]}" get csinode -o jsonpath='{.items[*].spec.drivers[*].name}')"
  log "installed: $("${K[@]}" -n "$NS" get pods -l app.kubernetes.io/instance=$RELEASE --no-headers | wc -l) pods, drivers registered"
}

# dir_pool: a fresh btrfs of 8 GiB (sparse) mounted at $DIR_POOL, unless one is (a reinstall keeps
# it and its volumes, as the other pools).
dir_pool() {
  mountpoint -q "$DIR_POOL" && return 0
  mkdir -p "$DIR_POOL"
  rm -f "$DIR_POOL.img"
  truncate -s 8G "$DIR_POOL.img"
  mkfs.btrfs -q -f "$DIR_POOL.img" >/dev/null
  mount -o loop "$DIR_POOL.img" "$DIR_POOL"
  log "directory pool: btrfs on $DIR_POOL.img at $DIR_POOL"
}

uninstall() {
  [ -x "$HELM" ] || build_helm
  "$HELM" uninstall "$RELEASE" --namespace "$NS" --wait --timeout 5m
  local sel=app.kubernetes.io/instance=$RELEASE left i
  for i in $(seq 60); do   # CSIStorageCapacities go with their owner, the DaemonSet: garbage collection
    left=$( { "${K[@]}" -n "$NS" get pods,serviceaccounts,roles,rolebindings,daemonsets,deployments -l "$sel" -o name
              "${K[@]}" -n "$NS" get csistoragecapacities -o name
              "${K[@]}" get clusterroles,clusterrolebindings,storageclasses,csidrivers -l "$sel" -o name
              "${K[@]}" get csidriver "$DRIVER" "$SHARED_DRIVER" -o name --ignore-not-found; } 2>/dev/null | sort -u)
    [ -z "$left" ] && break
    sleep 1
  done
  [ -z "$left" ] || die "left after helm uninstall:"$'\n'"$left"
  log "uninstalled: no pod, RBAC object, CSIDriver, StorageClass or capacity left"
}

# registered: kubelet's CSINode lists both drivers.
registered() {
  local d; d=$("${K[@]}" get csinode -o jsonpath='{.items[*].spec.drivers[*].name}')
  grep -qw "$DRIVER" <<<"$d" && grep -qw "$SHARED_DRIVER" <<<"$d"
}

stop_node() {
  local sel=app.kubernetes.io/instance=$RELEASE,app.kubernetes.io/component=node i
  "${K[@]}" -n "$NS" patch daemonset "$RELEASE-node" --type=merge \
    -p "{\"spec\":{\"template\":{\"spec\":{\"nodeSelector\":{\"$STOPPED_LABEL\":\"true\"}}}}}" >/dev/null
  for i in $(seq 120); do
    if [ -z "$("${K[@]}" -n "$NS" get pods -l "$sel" -o name)" ]; then
      log "stopped: no node pod of release $RELEASE runs"
      return 0
    fi
    sleep 1
  done
  die "the node pods of release $RELEASE are still there 2 minutes after the DaemonSet stopped selecting their node"
}

start_node() {
  local sel=app.kubernetes.io/instance=$RELEASE,app.kubernetes.io/component=node i
  "${K[@]}" -n "$NS" patch daemonset "$RELEASE-node" --type=json \
    -p "[{\"op\":\"remove\",\"path\":\"/spec/template/spec/nodeSelector/${STOPPED_LABEL/\//~1}\"}]" >/dev/null
  for i in $(seq 120); do
    if "${K[@]}" -n "$NS" wait --for=condition=Ready pod -l "$sel" --timeout=1s >/dev/null 2>&1 && registered; then
      log "started: $("${K[@]}" -n "$NS" get pods -l "$sel" -o jsonpath='{.items[*].metadata.name}')"
      return 0
    fi
    sleep 1
  done
  die "no node pod of release $RELEASE is Ready and registered 2 minutes after the DaemonSet selects the node again"
}

restart_driver() {
  local sel=app.kubernetes.io/instance=$RELEASE,app.kubernetes.io/component=node old i
  old=$("${K[@]}" -n "$NS" get pods -l "$sel" -o jsonpath='{.items[*].metadata.name}')
  [ -n "$old" ] || die "no node pod of release $RELEASE in namespace $NS"
  # --wait: returns once the pod is gone, i.e. filevol has exited and removed its socket.
  # shellcheck disable=SC2086
  "${K[@]}" -n "$NS" delete pod $old --wait=true --timeout=2m >/dev/null
  for i in $(seq 120); do
    if "${K[@]}" -n "$NS" wait --for=condition=Ready pod -l "$sel" --timeout=1s >/dev/null 2>&1 && registered; then
      log "restarted: $("${K[@]}" -n "$NS" get pods -l "$sel" -o jsonpath='{.items[*].metadata.name}') replaces $old"
      return 0
    fi
    sleep 1
  done
  die "the node pod that replaces $old is not Ready and registered after 2 minutes"
}

cmd=${1:-}; shift || true
case $cmd in
  images) images ;;
  install) install "$@" ;;
  uninstall) uninstall ;;
  restart-driver) restart_driver ;;
  stop-node) stop_node ;;
  start-node) start_node ;;
  helm) [ -x "$HELM" ] || build_helm; exec "$HELM" "$@" ;;
  kubectl) exec "${K[@]}" "$@" ;;
  *) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
