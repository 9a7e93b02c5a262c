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
KUBELET_ROOT=/var/lib/kubelet
NODE_NAME=vm            # resolves to 127.0.0.1 through /etc/hosts (apiserver -> kubelet)
BRIDGE=filevol-e2e0     # CNI bridge: no gateway, no masquerade, pod traffic stays on it
POD_SUBNET=10.88.0.0/16
SERVICE_CIDR=10.0.0.0/24

# The cache key: every input of the Go builds (versions, the pinned go.mod/go.sum files,
# the Go toolchain). Changing any of them selects a fresh cache directory.
versions_key() {
  local h
  h=$( {
      cat "$CLUSTER_DIR/versions.env"
      find "$TOOLS_DIR" \( -name go.mod -o -name go.sum -o -name '*.go' \) -print0 | sort -z | xargs -0 cat
      go version
      echo "cgo=0 buildvcs=false"
    } | sha256sum | cut -c1-12)
  echo "k8s-${KUBE_VERSION}-${h}"
}

KEY=$(versions_key)
KEY_DIR=$CACHE_ROOT/$KEY
BIN_DIR=$KEY_DIR/bin
IMG_DIR=$KEY_DIR/images

KUBECTL=$BIN_DIR/kubectl
ADMIN_KUBECONFIG=$STATE_DIR/admin.kubeconfig
CONTAINERD_SOCK=$STATE_DIR/containerd/containerd.sock

log() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { log "ERROR: $*" >&2; exit 1; }

PIDS_FILE=$STATE_DIR/pids
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
