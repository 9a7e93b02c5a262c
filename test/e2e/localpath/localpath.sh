#!/usr/bin/env bash
# rancher/local-path-provisioner on the e2e cluster: the local storage the time-to-running
# measurement (test/e2e/podtime) compares filevol with.
#
#   localpath.sh install     image from the cluster cache's binary (build.sh), imported into
#                            containerd; manifest.yaml applied; waits for the Deployment
#   localpath.sh uninstall   the objects, then the volumes' directory (its helper pods have
#                            removed what they made once the claims are gone)
#
# In the cluster like a user installs it, with what this cluster lacks (as filevol's chart
# values say): no kube-proxy, so the pod shares the host's network and reaches the API server
# on 127.0.0.1:6443; no registry, so its image is built here and its helper pods run the
# cluster's busybox.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/../cluster/lib.sh"
KC=(--kubeconfig "$ADMIN_KUBECONFIG")
IMAGE=filevol.local/local-path-provisioner:$LOCAL_PATH_VERSION
VOL_DIR=$STATE_DIR/local-path   # under the state directory: down.sh's rm covers a killed run

install() {
  local w; w=$(mktemp -d)
  mkdir -p "$w/rootfs" && cp "$BIN_DIR/local-path-provisioner" "$w/rootfs/"
  "$CLUSTER_DIR/images/mkimage.sh" "$w/lpp.tar" "$w/rootfs" '["/local-path-provisioner"]' 'null' "$IMAGE" >/dev/null
  ctr --address "$CONTAINERD_SOCK" -n k8s.io images import "$w/lpp.tar" >/dev/null
  rm -rf "$w"
  # What a killed run left: the cluster is new, so no volume of it is in use.
  [ -d "$VOL_DIR" ] && rm -rf --one-file-system "$VOL_DIR"
  mkdir -p "$VOL_DIR"
  sed -e "s|@IMAGE@|$IMAGE|g" -e "s|@HELPER@|$BUSYBOX_TAG|g" -e "s|@DIR@|$VOL_DIR|g" "$here/manifest.yaml" |
    "$KUBECTL" "${KC[@]}" apply -f - >/dev/null
  "$KUBECTL" "${KC[@]}" -n local-path-storage rollout status deploy/local-path-provisioner --timeout=120s >/dev/null
  log "local-path-provisioner $LOCAL_PATH_VERSION installed (StorageClass local-path, volumes in $VOL_DIR)"
}

uninstall() {
  sed -e "s|@IMAGE@|$IMAGE|g" -e "s|@HELPER@|$BUSYBOX_TAG|g" -e "s|@DIR@|$VOL_DIR|g" "$here/manifest.yaml" |
    "$KUBECTL" "${KC[@]}" delete --ignore-not-found --wait -f - >/dev/null
  [ -d "$VOL_DIR" ] && rm -rf --one-file-system "$VOL_DIR"
  return 0
}

case ${1:-} in
  install) install ;;
  uninstall) uninstall ;;
  *) die "usage: $0 install|uninstall" ;;
esac
