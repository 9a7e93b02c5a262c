#!/usr/bin/env bash
# Build (once) the external-snapshot-metadata sidecar and its repository's two client
# tools into a cache of their own:
#   ${FILEVOL_E2E_CACHE:-/var/cache/filevol-e2e}/snapshot-metadata-<tag>-<key>/
#     bin/csi-snapshot-metadata        the sidecar: serves SnapshotMetadata to backup tools
#     bin/snapshot-metadata-verifier   applies a snapshot's (or a delta's) blocks to a device
#                                      and compares it with the source device
#     bin/snapshot-metadata-lister     prints the ranges
#     crd/                             the SnapshotMetadataService CRD (cbt.storage.k8s.io)
#
# The Go module proxy does not serve this repository. Its source comes from
# FILEVOL_SNAPSHOT_METADATA_GIT (a git directory or URL holding the tag; default: GitHub),
# and must be the commit versions.env pins. The repository vendors its dependencies, so
# nothing else is downloaded. The tools are modules of their own that require a release
# of the repository the proxy does not serve either: they are built inside the
# repository's module instead (a scratch copy), against the same vendored code.
#
# Its own cache directory keeps it out of the cluster's cache key (lib.sh), so adding or
# moving it never rebuilds Kubernetes.
#
#   snapshot-metadata.sh                 build whatever is missing
#   snapshot-metadata.sh --print-dir     print the cache directory and exit
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

TAG=$SNAPSHOT_METADATA_VERSION
TOOLS=(csi-snapshot-metadata snapshot-metadata-verifier snapshot-metadata-lister)
# What the binaries are made of: the source and the toolchain (and the build's
# flags, below: change BUILD_FLAGS_VERSION when they change).
BUILD_FLAGS_VERSION=1
KEY=$( { echo "$TAG $SNAPSHOT_METADATA_COMMIT ${TOOLS[*]} $BUILD_FLAGS_VERSION"; go version; } | sha256sum | cut -c1-12)
DIR=$CACHE_ROOT/snapshot-metadata-$TAG-$KEY
if [ "${1:-}" = --print-dir ]; then echo "$DIR"; exit 0; fi

complete() {
  local t
  for t in "${TOOLS[@]}"; do [ -x "$DIR/bin/$t" ] || return 1; done
  [ -s "$DIR/crd/.complete" ]
}

mkdir -p "$CACHE_ROOT"
exec 9>"$CACHE_ROOT/.snapshot-metadata.lock"
flock 9
if complete; then log "snapshot-metadata: cache hit ($DIR)"; exit 0; fi

t0=$(date +%s)
W=$(mktemp -d /tmp/filevol-snapshot-metadata.XXXXXX); trap 'rm -rf "$W"' EXIT
SRC=${FILEVOL_SNAPSHOT_METADATA_GIT:-https://github.com/kubernetes-csi/external-snapshot-metadata.git}
log "snapshot-metadata: $TAG from $SRC"
if [ -d "$SRC" ]; then
  GIT=(git --git-dir="$SRC")
  [ -d "$SRC/.git" ] && GIT=(git -C "$SRC")
else
  git clone --quiet --bare --depth 1 --branch "$TAG" "$SRC" "$W/git" ||
    die "cannot clone $SRC at $TAG: set FILEVOL_SNAPSHOT_METADATA_GIT to a copy of kubernetes-csi/external-snapshot-metadata"
  GIT=(git --git-dir="$W/git")
fi
got=$("${GIT[@]}" rev-parse "$TAG^{commit}") || die "$SRC has no tag $TAG"
[ "$got" = "$SNAPSHOT_METADATA_COMMIT" ] || die "$TAG is $got in $SRC, versions.env pins $SNAPSHOT_METADATA_COMMIT"
mkdir "$W/src"
"${GIT[@]}" archive "$TAG" | tar -x -C "$W/src"

# The tools' main packages, moved into the repository's module (see above).
for t in snapshot-metadata-verifier snapshot-metadata-lister; do
  mkdir -p "$W/src/cmd/$t" && cp "$W/src/tools/$t/main.go" "$W/src/cmd/$t/"
done
rm -rf "$DIR" && mkdir -p "$DIR/bin" "$DIR/crd"
for t in "${TOOLS[@]}"; do
  log "  building $t"
  (cd "$W/src" && CGO_ENABLED=0 nice -n "${FILEVOL_E2E_NICE:-10}" go build -mod=vendor -buildvcs=false \
     -ldflags "-s -w -X main.version=$TAG" -o "$DIR/bin/$t" "./cmd/$t")
done
cp "$W/src/deploy/cbt.storage.k8s.io_snapshotmetadataservices.yaml" "$DIR/crd/"
echo "$TAG $SNAPSHOT_METADATA_COMMIT" > "$DIR/crd/.complete"
log "snapshot-metadata: built in $(( $(date +%s) - t0 ))s ($DIR)"
