#!/usr/bin/env bash
# Build (once) every binary and image the e2e cluster needs into a cache outside the
# checkout: ${FILEVOL_E2E_CACHE:-/var/cache/filevol-e2e}/<versions-key>/{bin,images,crd}.
# A second run with the same versions finds the binaries and their stamps and rebuilds
# nothing. Heavy builds run under `nice -n 10` so other work on the machine progresses.
#
#   build.sh            build whatever is missing
#   build.sh --print-bin-dir   print the bin dir for the current versions and exit
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

if [ "${1:-}" = --print-bin-dir ]; then echo "$BIN_DIR"; exit 0; fi

# Go settings for every build: static binaries, no VCS stamping (the tools live inside
# the filevol checkout), go.mod/go.sum are never modified here.
export CGO_ENABLED=0 GOFLAGS="-buildvcs=false -mod=readonly"
NICE=(nice -n "${FILEVOL_E2E_NICE:-10}")

# name|module dir (relative to tools/)|kind|package|ldflags
KUBE_LD=""
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  # Without these, binaries say v0.0.0-master+$Format:%H$ and kubectl/e2e.test choke on it.
  kmaj=${KUBE_VERSION#v}; kmaj=${kmaj%%.*}; kmin=${KUBE_VERSION#v*.}; kmin=${kmin%%.*}
  KUBE_LD+=" -X $p.gitVersion=$KUBE_VERSION -X $p.gitMajor=$kmaj -X $p.gitMinor=$kmin"
  KUBE_LD+=" -X $p.gitTreeState=clean -X $p.gitCommit=0000000000000000000000000000000000000000"
  KUBE_LD+=" -X $p.buildDate=2025-01-01T00:00:00Z"
done
KUBE_LD="-s -w$KUBE_LD"
COMPONENTS=(
  "etcd|etcd|build|go.etcd.io/etcd/server/v3|-s -w"
  "kube-apiserver|.|build|k8s.io/kubernetes/cmd/kube-apiserver|$KUBE_LD"
  "kube-controller-manager|.|build|k8s.io/kubernetes/cmd/kube-controller-manager|$KUBE_LD"
  "kube-scheduler|.|build|k8s.io/kubernetes/cmd/kube-scheduler|$KUBE_LD"
  "kubelet|.|build|k8s.io/kubernetes/cmd/kubelet|$KUBE_LD"
  "kubectl|.|build|k8s.io/kubernetes/cmd/kubectl|$KUBE_LD"
  "e2e.test|.|test|k8s.io/kubernetes/test/e2e|$KUBE_LD"
  "ginkgo|.|build|github.com/onsi/ginkgo/v2/ginkgo|-s -w"   # runs e2e.test in parallel (same ginkgo as e2e.test)
  "agnhost|.|build|k8s.io/kubernetes/test/images/agnhost|-s -w -X main.Version=$AGNHOST_VERSION"
  "csi-provisioner|sidecars/provisioner|build|github.com/kubernetes-csi/external-provisioner/v6/cmd/csi-provisioner|-s -w -X main.version=$CSI_PROVISIONER_VERSION"
  "csi-attacher|sidecars/attacher|build|github.com/kubernetes-csi/external-attacher/v4/cmd/csi-attacher|-s -w -X main.version=$CSI_ATTACHER_VERSION"
  "csi-resizer|sidecars/resizer|build|github.com/kubernetes-csi/external-resizer/v2/cmd/csi-resizer|-s -w -X main.version=$CSI_RESIZER_VERSION"
  "csi-snapshotter|sidecars/snapshotter|build|github.com/kubernetes-csi/external-snapshotter/v8/cmd/csi-snapshotter|-s -w -X main.version=$CSI_SNAPSHOTTER_VERSION"
  "snapshot-controller|sidecars/snapshotter|build|github.com/kubernetes-csi/external-snapshotter/v8/cmd/snapshot-controller|-s -w -X main.version=$CSI_SNAPSHOTTER_VERSION"
  "local-path-provisioner|localpath|build|github.com/rancher/local-path-provisioner|-s -w"   # its version is a const: no -X
)

STAMP=$KEY_DIR/stamp            # "<component> <spec-hash>" per built component
TIMES=$KEY_DIR/build-times.txt  # cold build durations, for the record
mkdir -p "$BIN_DIR" "$IMG_DIR"
touch "$STAMP"

spec_of() { printf '%s' "$1" | sha256sum | cut -c1-16; }
stamped() { grep -qxF "$1 $2" "$STAMP"; }
stamp() { # name spec
  { grep -v "^$1 " "$STAMP" || true; echo "$1 $2"; } > "$STAMP.tmp"
  mv -f "$STAMP.tmp" "$STAMP"
}

# Images: their inputs are the busybox binary, the pause source, agnhost, the shim, the
# image builder itself, and the bookworm packages of glibc-dns-testing (debroot, and the
# versions apt offers from the lists it has: fetched once, then read offline).
IMAGES=(pause busybox agnhost glibc-dns-testing)
image_spec() {
  local kdir; kdir=$(kube_src)
  {
    cat /bin/busybox "$kdir/build/pause/linux/pause.c" "$BIN_DIR/agnhost" \
      "$CLUSTER_DIR/images/mkimage.sh" "$CLUSTER_DIR/images/build-images.sh" \
      "$CLUSTER_DIR/images/nsenter-shim.sh" <(cluster_versions) \
      "$REPO_ROOT/hack/debian-bookworm.sh" "$REPO_ROOT"/hack/tools/cmd/debroot/*.go 2>/dev/null
    (source "$REPO_ROOT/hack/debian-bookworm.sh" && bookworm_apt "${FILEVOL_IMAGES_CACHE:-/var/cache/filevol-images}" --if-missing &&
      apt-cache show --no-all-versions coreutils dash libc6 | grep -E '^(Package|Version):')
  } | sha256sum | cut -c1-16
}
kube_src() { (cd "$TOOLS_DIR" && go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | jq -r .Dir); }

all_done() {
  local c name spec
  for c in "${COMPONENTS[@]}"; do
    IFS='|' read -r name _ _ _ _ <<<"$c"; spec=$(spec_of "$c")
    [ -x "$BIN_DIR/$name" ] && stamped "$name" "$spec" || return 1
  done
  [ -s "$KEY_DIR/crd/.complete" ] || return 1
  for t in "${IMAGES[@]}"; do [ -s "$IMG_DIR/$t.tar" ] || return 1; done
  [ -s "$IMG_DIR/.stamp" ] || return 1
}

t_start=$(date +%s)
# Serialize concurrent builds (a developer and CI on the same machine).
exec 9>"$CACHE_ROOT/.lock"
if ! flock -n 9; then log "e2e-tools: waiting for another build.sh to finish"; flock 9; fi

if all_done && [ "$(cat "$IMG_DIR/.stamp")" = "$(image_spec)" ]; then
  log "e2e-tools: cache hit, nothing to build ($KEY_DIR)"
  exit 0
fi

log "e2e-tools: building into $KEY_DIR"
sanity_check_versions() {
  local got
  got=$(cd "$TOOLS_DIR" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
  [ "$got" = "$KUBE_VERSION" ] || die "tools/go.mod pins k8s.io/kubernetes $got, versions.env says $KUBE_VERSION"
  got=$(cd "$TOOLS_DIR/etcd" && go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
  [ "$got" = "$ETCD_VERSION" ] || die "tools/etcd pins etcd $got, versions.env says $ETCD_VERSION"
  local pair
  for pair in provisioner:external-provisioner/v6:$CSI_PROVISIONER_VERSION attacher:external-attacher/v4:$CSI_ATTACHER_VERSION \
              resizer:external-resizer/v2:$CSI_RESIZER_VERSION snapshotter:external-snapshotter/v8:$CSI_SNAPSHOTTER_VERSION; do
    IFS=: read -r d m v <<<"$pair"
    got=$(cd "$TOOLS_DIR/sidecars/$d" && go list -m -f '{{.Version}}' "github.com/kubernetes-csi/$m")
    [ "$got" = "$v" ] || die "tools/sidecars/$d pins $m $got, versions.env says $v"
  done
  got=$(cd "$TOOLS_DIR/localpath" && go list -m -f '{{.Version}}' github.com/rancher/local-path-provisioner)
  [ "$got" = "$LOCAL_PATH_VERSION" ] || die "tools/localpath pins local-path-provisioner $got, versions.env says $LOCAL_PATH_VERSION"
}
sanity_check_versions

for c in "${COMPONENTS[@]}"; do
  IFS='|' read -r name dir kind pkg ld <<<"$c"; spec=$(spec_of "$c")
  if [ -x "$BIN_DIR/$name" ] && stamped "$name" "$spec"; then continue; fi
  log "  building $name ($pkg)"
  s=$(date +%s)
  tmp=$BIN_DIR/.$name.tmp
  rm -f "$tmp"
  if [ "$kind" = test ]; then
    (cd "$TOOLS_DIR/$dir" && "${NICE[@]}" go test -c -ldflags "$ld" -o "$tmp" "$pkg")
  else
    (cd "$TOOLS_DIR/$dir" && "${NICE[@]}" go build -ldflags "$ld" -o "$tmp" "$pkg")
  fi
  mv -f "$tmp" "$BIN_DIR/$name"
  stamp "$name" "$spec"
  d=$(( $(date +%s) - s ))
  echo "$name ${d}s $(date -u +%FT%TZ)" >> "$TIMES"
  log "  built $name in ${d}s"
done

# VolumeSnapshot CRDs: they live in the separate client/v8 module (config/crd/), not in v8.
if [ ! -s "$KEY_DIR/crd/.complete" ]; then
  src=$(cd "$TOOLS_DIR/sidecars/snapshotter" && go mod download -json \
        "github.com/kubernetes-csi/external-snapshotter/client/v8@$CSI_SNAPSHOTTER_VERSION" | jq -r .Dir)
  rm -rf "$KEY_DIR/crd" && mkdir -p "$KEY_DIR/crd"
  cp "$src"/config/crd/*.yaml "$KEY_DIR/crd/"
  rm -f "$KEY_DIR/crd/kustomization.yaml"
  echo "client/v8@$CSI_SNAPSHOTTER_VERSION" > "$KEY_DIR/crd/.complete"
  log "  copied snapshot CRDs from $src/config/crd"
fi

spec=$(image_spec)
if [ "$(cat "$IMG_DIR/.stamp" 2>/dev/null)" != "$spec" ]; then
  s=$(date +%s)
  rm -f "$IMG_DIR/.stamp"
  "${NICE[@]}" "$CLUSTER_DIR/images/build-images.sh" "$(kube_src)" "$BIN_DIR/agnhost" "$IMG_DIR"
  echo "$spec" > "$IMG_DIR/.stamp"
  d=$(( $(date +%s) - s ))
  echo "images ${d}s $(date -u +%FT%TZ)" >> "$TIMES"
  log "  built images in ${d}s"
fi

log "e2e-tools: done in $(( $(date +%s) - t_start ))s ($KEY_DIR)"
