#!/usr/bin/env bash
# Build (once) what a Velero backup and restore on the e2e cluster runs, into a cache of
# its own:
#   ${FILEVOL_E2E_CACHE:-/var/cache/filevol-e2e}/velero-<version>-<key>/bin/
#     velero                  server, node-agent and CSI data mover: one binary (and the CLI)
#     velero-plugin-for-aws   the object store plugin (S3 API)
#     s3store                 the harness's S3 store (gofakes3 over a bbolt file, velero/cmd/s3store)
#     cp-plugin               the plugin image's entrypoint (velero/cmd/cp-plugin)
#
# They come from the pinned module test/e2e/cluster/velero (go.mod/go.sum committed):
# velero's go.mod replaces kopia with project-velero's fork, and `go install pkg@version`
# refuses a module with a replace directive, so the module repeats that replace. It lives
# outside tools/, and versions.env's VELERO_ lines are left out of cluster_versions, so
# the cluster's cache key (lib.sh versions_key) does not depend on any of it.
#
#   velero.sh                     build whatever is missing
#   velero.sh --print-dir         print the cache directory and exit
#   velero.sh install-yaml S3_URL SECRET_FILE VELERO_IMAGE PLUGIN_IMAGE
#                                 print `velero install --dry-run -o yaml` for the CSI data
#                                 mover against the harness's store (velero_install_yaml)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MOD=$CLUSTER_DIR/velero
BUCKET=velero-e2e
# What the binaries are made of: the pinned module, its programs and the toolchain (and
# the build's flags, below: change BUILD_FLAGS_VERSION when they change).
BUILD_FLAGS_VERSION=1
VKEY=$( { grep '^VELERO_' "$CLUSTER_DIR/versions.env"
          find "$MOD" \( -name go.mod -o -name go.sum -o \( -name '*.go' ! -name '*_test.go' \) \) -print0 |
            sort -z | xargs -0 cat
          echo "$BUILD_FLAGS_VERSION"; go version; } | sha256sum | cut -c1-12)
DIR=$CACHE_ROOT/velero-$VELERO_VERSION-$VKEY
TOOLS=(velero velero-plugin-for-aws s3store cp-plugin)

# velero_install_yaml S3_URL SECRET_FILE VELERO_IMAGE PLUGIN_IMAGE: the manifests of a
# Velero that backs up CSI volumes by moving their snapshots' data (kopia, run by the
# node-agent's data-mover pods) to the bucket at S3_URL (http://IP:PORT of s3store).
#   --features=EnableCSI      1.18 still skips the CSI backup/restore actions without it
#                             (pkg/util/csi/util.go ShouldSkipAction)
#   --use-node-agent          the DaemonSet whose pod template the data movers copy
#   --privileged-node-agent   block-mode claims (velero: "required to backup block devices")
#   --default-snapshot-move-data   every backup moves its CSI snapshots' data
#   --use-volume-snapshots=false   no VolumeSnapshotLocation: the snapshots are CSI ones
#   region, s3ForcePathStyle, s3Url: an S3 API at an IP address (no virtual-host buckets)
#   --kubeconfig              a placeholder: velero builds its client before it reads
#                             --dry-run, and refuses to start without a configuration, but
#                             renders without contacting any server (127.0.0.1:1 is never
#                             dialled), so rendering needs no cluster
velero_install_yaml() {
  [ $# = 4 ] || die "velero_install_yaml S3_URL SECRET_FILE VELERO_IMAGE PLUGIN_IMAGE"
  [[ $1 =~ ^http://[0-9.]+:[0-9]+$ ]] || die "S3_URL $1: want http://IP:PORT (the harness's s3store)"
  [ -s "$2" ] || die "secret file $2 missing or empty"
  local kc rc=0
  kc=$(mktemp /tmp/filevol-velero-kubeconfig.XXXXXX)
  printf '%s\n' 'apiVersion: v1' 'kind: Config' 'current-context: none' \
    'clusters: [{name: none, cluster: {server: "https://127.0.0.1:1"}}]' \
    'users: [{name: none, user: {}}]' 'contexts: [{name: none, context: {cluster: none, user: none}}]' > "$kc"
  "$DIR/bin/velero" install --kubeconfig "$kc" --dry-run -o yaml \
    --provider aws --plugins "$4" --image "$3" \
    --bucket "$BUCKET" --secret-file "$2" \
    --backup-location-config "region=minio,s3ForcePathStyle=true,s3Url=$1" \
    --use-volume-snapshots=false \
    --features=EnableCSI --use-node-agent --privileged-node-agent \
    --default-snapshot-move-data || rc=$?
  rm -f "$kc"
  return "$rc"
}

complete() {
  local t
  for t in "${TOOLS[@]}"; do [ -x "$DIR/bin/$t" ] || return 1; done
  [ -s "$DIR/.complete" ]
}

# check_pins: versions.env says what go.mod pins (go.mod is what the build uses).
check_pins() {
  local m want got
  for m in "github.com/vmware-tanzu/velero $VELERO_VERSION" \
           "github.com/vmware-tanzu/velero-plugin-for-aws $VELERO_PLUGIN_FOR_AWS_VERSION" \
           "github.com/johannesboyne/gofakes3 $VELERO_GOFAKES3_VERSION"; do
    set -- $m
    got=$(cd "$MOD" && go list -m -f '{{.Version}}' "$1")
    [ "$got" = "$2" ] || die "$MOD/go.mod pins $1 $got, versions.env says $2"
  done
}

build() {
  mkdir -p "$CACHE_ROOT"
  exec 9>"$CACHE_ROOT/.velero.lock"
  flock 9
  if complete; then log "velero: cache hit ($DIR)"; return 0; fi
  check_pins
  local t0 pkg t
  t0=$(date +%s)
  rm -rf "$DIR" && mkdir -p "$DIR/bin"
  for t in "${TOOLS[@]}"; do
    case $t in
      velero) pkg=github.com/vmware-tanzu/velero/cmd/velero ;;
      velero-plugin-for-aws) pkg=github.com/vmware-tanzu/velero-plugin-for-aws/velero-plugin-for-aws ;;
      *) pkg=./cmd/$t ;;
    esac
    log "  building $t"
    (cd "$MOD" && CGO_ENABLED=0 nice -n "${FILEVOL_E2E_NICE:-10}" go build -mod=readonly -buildvcs=false -trimpath \
       -ldflags "-s -w -X github.com/vmware-tanzu/velero/pkg/buildinfo.Version=$VELERO_VERSION" \
       -o "$DIR/bin/$t" "$pkg")
  done
  got=$("$DIR/bin/velero" version --client-only | awk '/Version:/ {print $2}')
  [ "$got" = "$VELERO_VERSION" ] || die "$DIR/bin/velero says $got, versions.env says $VELERO_VERSION"
  echo "$VELERO_VERSION $VELERO_PLUGIN_FOR_AWS_VERSION $VELERO_GOFAKES3_VERSION" > "$DIR/.complete"
  log "velero: built in $(( $(date +%s) - t0 ))s ($DIR)"
}

case ${1:-} in
  --print-dir) echo "$DIR" ;;
  install-yaml) shift; complete || die "velero tools missing: run $0 first"; velero_install_yaml "$@" ;;
  "") build ;;
  *) die "usage: $0 [--print-dir | install-yaml S3_URL SECRET_FILE VELERO_IMAGE PLUGIN_IMAGE]" ;;
esac
