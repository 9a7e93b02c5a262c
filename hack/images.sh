#!/usr/bin/env bash
# hack/images.sh [OUT_DIR]: build the container images as OCI image tarballs,
# without Docker or a registry (default OUT_DIR: _output/images), for this host's
# architecture: what `make images` and the e2e harness (hack/tools/e2e/chart.sh) import.
# hack/images.sh --multiarch [OUT_DIR]: the multi-platform driver image instead, what
# `make image` builds and `make push` sends to a registry (below).
#
#   filevol.tar          ghcr.io/filevol/filevol:v<chart appVersion> and :<git version>
#                        layer 1: Debian bookworm packages (dpkg-deb -x, no maintainer
#                        scripts): PACKAGES below plus exactly the libraries their
#                        programs load (hack/tools/cmd/debroot), from bookworm whatever
#                        the host's apt is set to (hack/debian-bookworm.sh); layer 2: bin/filevol
#                        (make build, DWARF stripped)
#   csi-provisioner.tar  registry.k8s.io/sig-storage/csi-provisioner:<versions.env> etc.:
#   csi-resizer.tar      the binaries test/e2e/cluster/build.sh cached, built from the
#   csi-snapshotter.tar  same module versions, each alone in a one-file image, named
#   csi-attacher.tar     like the official image so the chart's defaults resolve
#   csi-snapshot-metadata.tar   the same, from test/e2e/cluster/snapshot-metadata.sh's cache
#   images.txt           tarball -> names, for `ctr -n k8s.io images import`
#
# The rootfs is checked before it is packed: every ELF file's libraries resolve
# (the image's own ld.so --list, in a chroot) and the programs filevol runs start.
# Needs root (chroot), apt-get, dpkg-deb, GNU tar and Go. .deb files and the unpacked
# rootfs (per package lists and code, see below) are cached in
# ${FILEVOL_IMAGES_CACHE:-/var/cache/filevol-images}.
#
# --ceph [OUT_DIR]: only filevol-ceph.tar (ghcr.io/filevol/filevol-ceph), the filevol
# image plus the ceph CLI that the shared pool's controller runs to evict a node's
# ceph-fuse client (hack/images-ceph.sh says what it holds). A second image, not the
# filevol image grown, because every node pulls the filevol image and one controller
# needs the CLI. Measured (bookworm's ceph 16.2.15): filevol.tar 45.6 MB; the CLI
# (ceph-common's /usr/bin/ceph alone, Python 3.11, python3-rados and -cephfs and the
# libraries they load) is a third layer of 21.9 MB, +48 % (57 MB unpacked); all of
# ceph-common would have been about +58 MB, +127 % (its tools load boost, ICU, curl,
# ldap, ...). filevol-ceph.tar's first two layers are filevol.tar's, so a node that has
# one fetches only the CLI's layer of the other. Host architecture only: --multiarch
# does not make it (bookworm has the arm64 packages; not built or checked here).
#
# --multiarch: filevol-multiarch.tar, one OCI image index named like filevol.tar
# (ghcr.io/filevol/filevol:v<appVersion> and :<git version>) with an image per platform
# of FILEVOL_PLATFORMS (default "linux/amd64 linux/arm64"; the Makefile's PLATFORMS):
# the same Debian packages, of that architecture (apt download-only through
# hack/debian-bookworm.sh --arch, debroot -arch), and filevol built with GOARCH and
# CGO_ENABLED=0 (a static binary; DWARF left out with -w). The host's architecture is
# checked as above when run as root; every architecture is checked statically (debroot
# -check: each ELF file is of that machine, and its interpreter and DT_NEEDED libraries
# resolve inside the rootfs), since this host cannot execute arm64 programs (no qemu).
# No sidecar image is built there: the chart's sidecars (csi-provisioner, -resizer,
# -snapshotter, -attacher, node-driver-registrar, livenessprobe) are the official
# multi-platform images on registry.k8s.io at the tags charts/filevol/values.yaml pins,
# and registrar/livenessProbe=builtin needs neither of the last two. The rootfs of each
# architecture is cached like the host's (rootfs.ARCH-KEY.tar). Writes
# filevol-multiarch.txt (tarball, platforms, names) and per platform the package and
# file lists. Runs without root too, with the static checks only.
#
# --velero [OUT_DIR]: only velero.tar and velero-plugin-for-aws.tar (hack/images-velero.sh
# says what they hold), from test/e2e/cluster/velero.sh's cache, and velero-images.txt;
# the default build neither builds nor lists them. No root needed.
set -euo pipefail
CEPH=; if [ "${1:-}" = --ceph ]; then CEPH=1; shift; fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MULTIARCH= VELERO=
if [ "${1:-}" = --multiarch ]; then MULTIARCH=1; shift; fi
if [ "${1:-}" = --velero ]; then VELERO=1; shift; fi
OUT=$(realpath -m "${1:-$ROOT/_output/images}")
CACHE=${FILEVOL_IMAGES_CACHE:-/var/cache/filevol-images}
FILEVOL_REPO=${FILEVOL_IMAGE:-ghcr.io/filevol/filevol}
# What the driver runs (mkfs/resize/fsck/blkid for ext4, xfs and btrfs, mount/losetup).
PACKAGES=(e2fsprogs xfsprogs btrfs-progs util-linux mount libc6)
# Files debian:bookworm-slim leaves out too (dpkg path-exclude); copyright files stay.
SLIM=(usr/share/man usr/share/info usr/share/groff usr/share/lintian usr/share/linda usr/share/locale usr/share/bash-completion)

log() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { log "ERROR: $*" >&2; exit 1; }
[ -n "$MULTIARCH$VELERO" ] || [ "$(id -u)" = 0 ] || die "hack/images.sh needs root (chroot checks of the rootfs)"
for c in apt-get apt-cache dpkg-deb tar chroot jq readelf objcopy go; do command -v "$c" >/dev/null || die "$c missing"; done

W=$(mktemp -d /tmp/filevol-images.XXXXXX); trap 'rm -rf "$W"' EXIT
mkdir -p "$OUT" "$CACHE/debs"
TAR=(tar --numeric-owner --owner=0 --group=0 --sort=name --mtime=2025-01-01 --format=posix
     --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime)

# rootfs ARCH DIR LIST: the Debian bookworm rootfs of ARCH at DIR, its package list at LIST.
rootfs() {
  local arch=$1 R=$2 list=$3 key cached apt=() name=${ROOTFS_NAME:-rootfs}
  log "Debian bookworm rootfs ($arch): ${PACKAGES[*]} + their libraries"
  # apt (and debroot, through it) sees bookworm only: its own sources, lists and status.
  source "$ROOT/hack/debian-bookworm.sh"
  if [ "$arch" != "$HOST_ARCH" ]; then apt=(--arch "$arch"); name=$name.$arch; fi
  bookworm_apt "$CACHE" "${apt[@]}"
  # The rootfs is a function of the package lists apt fetched (refreshed once a day), the
  # packages asked for and this script's and debroot's code: made once per such key and
  # kept in the cache (resolving and unpacking took ~35 s of every build).
  key=$( { cat "$(dirname "$APT_CONFIG")"/lists/*InRelease; printf '%s\n' "${PACKAGES[@]}" "${SLIM[@]}" ${DEBROOT_ARGS[@]+"${DEBROOT_ARGS[@]}"}
           [ "$arch" = "$HOST_ARCH" ] || echo "$arch"
           cat "$ROOT"/hack/images.sh "$ROOT"/hack/tools/cmd/debroot/*.go; } | sha256sum | cut -c1-16)
  cached=$CACHE/$name-$key.tar
  if [ -s "$cached" ] && [ -s "$cached.packages.txt" ]; then
    log "  cached: $cached"
    mkdir "$R" && tar -xf "$cached" -C "$R" && cp "$cached.packages.txt" "$list"
  else
    "$W/debroot" -arch "$arch" ${DEBROOT_ARGS[@]+"${DEBROOT_ARGS[@]}"} -debs "$CACHE/debs" -out "$R" -list "$list" "${PACKAGES[@]}"
    for d in "${SLIM[@]}"; do rm -rf "${R:?}/$d"; done
    find "$R/usr/share/doc" -type f ! -name copyright -delete 2>/dev/null || true
    find "$R/usr/share/doc" -depth -type d -empty -delete 2>/dev/null || true
    ln -s ../proc/self/mounts "$R/etc/mtab"        # mount(8) and e2fsprogs look here
    install -d -m 1777 "$R/tmp"
    # Older keys go: one rootfs per architecture is kept.
    rm -f "$CACHE/$name"-*.tar "$CACHE/$name"-*.tar.packages.txt
    "${TAR[@]}" -C "$R" -cf "$cached.new" . && mv "$cached.new" "$cached"
    cp "$list" "$cached.packages.txt"
  fi
}

# chroot_check R: every program's libraries resolve (the image's own ld.so --list) and the
# programs filevol runs start, in a chroot (host architecture, root). R holds
# /usr/local/bin/filevol.
chroot_check() {
  local R=$1 fail=0 f rel out cmd
  # For the checks only (removed below): /dev/null that e2fsck opens (the container
  # runtime provides /dev).
  mkdir "$R/dev" && mknod -m 666 "$R/dev/null" c 1 3
  log "checking the rootfs in a chroot"
  while IFS= read -r f; do
    rel=/${f#"$R"/}
    head -c4 "$f" | grep -q 'ELF' || continue
    readelf -h "$f" 2>/dev/null | grep -qE 'Type: +(EXEC|DYN)' || continue
    readelf -l "$f" 2>/dev/null | grep -q 'INTERP' || continue     # shared libraries: covered by their users
    if out=$(chroot "$R" /lib64/ld-linux-x86-64.so.2 --list "$rel" 2>&1) && ! grep -q 'not found' <<<"$out"; then :; else
      echo "  $rel: $(grep 'not found' <<<"$out" | tr -s '\t ' ' ' | tr '\n' ';')"; fail=1
    fi
  done < <(find "$R"/{bin,sbin,usr/bin,usr/sbin,usr/local/bin} -type f 2>/dev/null | sort)
  [ "$fail" = 0 ] || die "programs with unresolved libraries (above)"
  for cmd in "mkfs.ext4 -V" "mkfs.xfs -V" "mkfs.btrfs --version" "resize2fs -P /dev/null" "xfs_growfs -V" \
             "btrfs --version" "blkid -V" "e2fsck -V" "mount -V" "umount -V" "losetup -V" "filevol --help"; do
    set -- $cmd
    out=$(env -i PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C chroot "$R" "$@" 2>&1 || true)
    grep -qiE 'not found|error while loading|No such file' <<<"$out" && die "$cmd in the image: $out"
    printf '  %-22s %s\n' "$1" "$(head -1 <<<"$out")"
  done
  rm -r "$R/dev"
}

# image_files LAYOUT_DIR MANIFEST_HEX: every file of the image whose manifest is that
# blob of the extracted layout, listed.
image_files() {
  local V=$1 manifest=$2 l
  for l in $(jq -r '.layers[].digest | sub("sha256:"; "")' "$V/blobs/sha256/$manifest"); do
    tar -tzf "$V/blobs/sha256/$l"
  done | sed 's|^\./||; /^$/d' | sort
}

HOST_ARCH=$(dpkg --print-architecture)

# multiarch: filevol-multiarch.tar, the multi-platform driver image (the header says what).
multiarch() {
  local plats=() p arch R V version top idx m layers=() names
  read -r -a plats <<<"${FILEVOL_PLATFORMS:-linux/amd64 linux/arm64}"
  version=$(make -s -C "$ROOT" print-version)
  rm -f "$OUT"/filevol-multiarch.*
  for p in "${plats[@]}"; do
    arch=${p#linux/}
    [[ $p == linux/* && " amd64 arm64 " == *" $arch "* ]] || die "platform $p: only linux/amd64 and linux/arm64 are built"
    log "filevol binary for $p (make build-arch ARCH=$arch: CGO_ENABLED=0, no DWARF)"
    make -s -C "$ROOT" build-arch ARCH="$arch"
    R=$W/rootfs-$arch
    rootfs "$arch" "$R" "$OUT/filevol-multiarch.$arch.packages.txt"
    install -D -m 0755 "$ROOT/bin/filevol-linux-$arch" "$R/usr/local/bin/filevol"
    log "checking the $arch rootfs statically (no program of it runs here)"
    "$W/debroot" -arch "$arch" -check "$R"
    if [ "$arch" = "$HOST_ARCH" ] && [ "$(id -u)" = 0 ]; then
      chroot_check "$R"
    elif [ "$arch" = "$HOST_ARCH" ]; then
      log "  not root: no chroot check of the $arch rootfs (the static check above only)"
    fi
    rm -r "$R/usr/local/bin/filevol"; rmdir "$R/usr/local/bin" "$R/usr/local" 2>/dev/null || true
    log "$arch rootfs ok: $(du -sh "$R" | cut -f1), $(find "$R" -type f | wc -l) files"
    "${TAR[@]}" -C "$R" -cf "$W/debian-$arch.tar" .
    mkdir -p "$W/app-$arch/usr/local/bin" && install -m 0755 "$ROOT/bin/filevol-linux-$arch" "$W/app-$arch/usr/local/bin/filevol"
    "${TAR[@]}" -C "$W/app-$arch" -cf "$W/filevol-$arch.tar" .
    layers+=(-platform "$p" -layer "$W/debian-$arch.tar" -layer "$W/filevol-$arch.tar")
    rm -rf "$R"
  done
  "$W/ociimage" -o "$OUT/filevol-multiarch.tar" "${layers[@]}" \
    -entrypoint '["/usr/local/bin/filevol"]' -label "org.opencontainers.image.version=$version" \
    -label "org.opencontainers.image.source=https://github.com/filevol/filevol" \
    -tag "$FILEVOL_REPO:v$app" -tag "$FILEVOL_REPO:$version"

  # What the tarball really holds: one index, each platform's files listed and checked.
  V=$W/verify-multiarch; mkdir "$V" && tar -xf "$OUT/filevol-multiarch.tar" -C "$V"
  top=$(jq -r '[.manifests[].digest] | unique | if length == 1 then .[0] else error("not one image") end | sub("sha256:"; "")' "$V/index.json")
  idx=$V/blobs/sha256/$top
  [ "$(jq -r .mediaType "$idx")" = application/vnd.oci.image.index.v1+json ] || die "filevol-multiarch.tar: not an image index"
  [ "$(jq -r '[.manifests[].platform | "\(.os)/\(.architecture)"] | join(" ")' "$idx")" = "${plats[*]}" ] ||
    die "filevol-multiarch.tar: platforms $(jq -c '[.manifests[].platform]' "$idx"), want ${plats[*]}"
  for p in "${plats[@]}"; do
    arch=${p#linux/}
    m=$(jq -r --arg a "$arch" '.manifests[] | select(.platform.architecture == $a) | .digest | sub("sha256:"; "")' "$idx")
    image_files "$V" "$m" > "$OUT/filevol-multiarch.$arch.files.txt"
    local triplet=x86_64-linux-gnu loader=lib64/ld-linux-x86-64.so.2
    [ "$arch" = arm64 ] && triplet=aarch64-linux-gnu loader=lib/ld-linux-aarch64.so.1
    for f in sbin/mkfs.ext4 sbin/mke2fs sbin/e2fsck sbin/resize2fs sbin/mkfs.xfs usr/sbin/xfs_growfs sbin/mkfs.btrfs \
             bin/btrfs sbin/blkid bin/mount bin/umount sbin/losetup "$loader" \
             "lib/$triplet/libc.so.6" "lib/$triplet/libext2fs.so.2" usr/local/bin/filevol; do
      grep -qx "$f" "$OUT/filevol-multiarch.$arch.files.txt" || die "$f is not in the $p image of filevol-multiarch.tar"
    done
    log "$p image: $(wc -l < "$OUT/filevol-multiarch.$arch.files.txt") entries (list: $OUT/filevol-multiarch.$arch.files.txt)"
  done
  names="$FILEVOL_REPO:v$app $FILEVOL_REPO:$version"
  echo "filevol-multiarch.tar $(tr ' ' , <<<"${plats[*]}") $names" > "$OUT/filevol-multiarch.txt"
  log "done: $OUT/filevol-multiarch.tar ($(du -m "$OUT/filevol-multiarch.tar" | cut -f1) MB): ${plats[*]}; $names"
}

log "tools (hack/tools module)"
(cd "$ROOT/hack/tools" && go build -o "$W/ociimage" ./cmd/ociimage && go build -o "$W/debroot" ./cmd/debroot)

app=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$ROOT/charts/filevol/Chart.yaml")
[ -n "$app" ] || die "no appVersion in charts/filevol/Chart.yaml"
if [ -n "$MULTIARCH" ]; then multiarch; exit 0; fi
if [ -n "$VELERO" ]; then
  # shellcheck source=hack/images-velero.sh
  source "$ROOT/hack/images-velero.sh"
  velero_images; exit 0
fi

log "filevol binary (make build)"
make -s -C "$ROOT" build
# The image carries bin/filevol without its DWARF (symbols stay: panics keep
# their stack traces): 33 MB -> about 23 MB.
objcopy --strip-debug "$ROOT/bin/filevol" "$W/filevol"
version=$("$ROOT/bin/filevol" --version 2>/dev/null | awk '{print $NF}' || true)
[ -n "$version" ] || version=$(cd "$ROOT" && git describe --tags --always --dirty 2>/dev/null || echo dev)
if [ -n "$CEPH" ]; then
  # shellcheck source=hack/images-ceph.sh
  source "$ROOT/hack/images-ceph.sh"
  ceph_image; exit 0
fi

R=$W/rootfs
rootfs "$HOST_ARCH" "$R" "$OUT/filevol.packages.txt"
# For the checks only (removed below): the binary.
install -D -m 0755 "$W/filevol" "$R/usr/local/bin/filevol"
chroot_check "$R"
rm -r "$R/usr/local/bin/filevol"; rmdir "$R/usr/local/bin" "$R/usr/local" 2>/dev/null || true
elfs=$(find "$R" -type f -exec sh -c 'head -c4 "$1" | grep -q ELF' _ {} \; -print | wc -l)
log "rootfs ok: $(du -sh "$R" | cut -f1), $(find "$R" -type f | wc -l) files ($elfs ELF)"

"${TAR[@]}" -C "$R" -cf "$W/debian.tar" .
mkdir -p "$W/app/usr/local/bin" && install -m 0755 "$W/filevol" "$W/app/usr/local/bin/filevol"
"${TAR[@]}" -C "$W/app" -cf "$W/filevol.tar" .
"$W/ociimage" -o "$OUT/filevol.tar" -layer "$W/debian.tar" -layer "$W/filevol.tar" \
  -entrypoint '["/usr/local/bin/filevol"]' -label "org.opencontainers.image.version=$version" \
  -label "org.opencontainers.image.source=https://github.com/filevol/filevol" \
  -tag "$FILEVOL_REPO:v$app" -tag "$FILEVOL_REPO:$version"
echo "filevol.tar $FILEVOL_REPO:v$app $FILEVOL_REPO:$version" > "$OUT/images.txt"

# What the tarball really holds: every layer of the image, listed.
V=$W/verify; mkdir "$V" && tar -xf "$OUT/filevol.tar" -C "$V"
manifest=$(jq -r '.manifests[0].digest | sub("sha256:"; "")' "$V/index.json")
image_files "$V" "$manifest" > "$OUT/filevol.files.txt"
for f in sbin/mkfs.ext4 sbin/mke2fs sbin/e2fsck sbin/resize2fs sbin/mkfs.xfs usr/sbin/xfs_growfs sbin/mkfs.btrfs \
         bin/btrfs sbin/blkid bin/mount bin/umount sbin/losetup lib64/ld-linux-x86-64.so.2 \
         lib/x86_64-linux-gnu/libc.so.6 lib/x86_64-linux-gnu/libext2fs.so.2 usr/local/bin/filevol; do
  grep -qx "$f" "$OUT/filevol.files.txt" || die "$f is not in filevol.tar"
done
log "filevol.tar holds $(wc -l < "$OUT/filevol.files.txt") entries (list: $OUT/filevol.files.txt)"

log "sidecar images from the e2e cluster's cached binaries"
# shellcheck source=/dev/null
source "$ROOT/test/e2e/cluster/versions.env"
bin=$("$ROOT/test/e2e/cluster/build.sh" --print-bin-dir)
# csi-snapshot-metadata is built apart from the cluster's binaries (its source is not on
# the module proxy), by test/e2e/cluster/snapshot-metadata.sh.
smbin=$("$ROOT/test/e2e/cluster/snapshot-metadata.sh" --print-dir)/bin
for s in "csi-provisioner $CSI_PROVISIONER_VERSION $bin build.sh" "csi-resizer $CSI_RESIZER_VERSION $bin build.sh" \
         "csi-snapshotter $CSI_SNAPSHOTTER_VERSION $bin build.sh" "csi-attacher $CSI_ATTACHER_VERSION $bin build.sh" \
         "csi-snapshot-metadata $SNAPSHOT_METADATA_VERSION $smbin snapshot-metadata.sh"; do
  set -- $s   # name version directory builder
  [ -x "$3/$1" ] || die "$3/$1 missing: run make e2e-tools (test/e2e/cluster/$4) first"
  got=$("$3/$1" --version | awk '{print $NF}')
  [ "$got" = "$2" ] || die "$3/$1 says $got, versions.env says $2"
  readelf -l "$3/$1" | grep -q INTERP && die "$3/$1 is not static"
  rm -rf "$W/s" && install -D -m 0755 "$3/$1" "$W/s/$1"
  "${TAR[@]}" -C "$W/s" -cf "$W/$1.layer.tar" .
  "$W/ociimage" -o "$OUT/$1.tar" -layer "$W/$1.layer.tar" -entrypoint "[\"/$1\"]" \
    -label "org.opencontainers.image.version=$2" -tag "registry.k8s.io/sig-storage/$1:$2"
  echo "$1.tar registry.k8s.io/sig-storage/$1:$2" >> "$OUT/images.txt"
done
log "done: $OUT"
ls -l "$OUT"/*.tar | awk '{printf "  %-22s %6.1f MB\n", $NF, $5/1e6}' | sed "s|$OUT/||"
