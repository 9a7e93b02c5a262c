# shellcheck shell=bash
# Sourced by hack/images.sh --ceph (whose header says why this is a second image):
# filevol-ceph.tar, ghcr.io/filevol/filevol-ceph:v<chart appVersion> and :<git version>
# (FILEVOL_CEPH_REPO overrides the repository), for this host's architecture only.
# The shared pool's controller runs it when the chart's sharedPool.controller.cephCLI
# is true: its filevol evicts a force-detached node's ceph-fuse client with
# `ceph tell mds.* client evict` (internal/cephevict), and the filevol image has no
# ceph program.
#
#   layer 1, 2   filevol.tar's two layers, byte for byte (the Debian rootfs, then
#                bin/filevol): a node that pulled filevol.tar fetches layer 3 only
#   layer 3      the ceph CLI: ceph-common's /usr/bin/ceph alone (debroot -only; the
#                package's other 45 MB of tools are left out), the Python 3.11
#                interpreter and standard library, python3-rados (librados2),
#                python3-cephfs (libcephfs2) and the modules the CLI imports
#                (ceph_argparse, ceph_daemon, prettytable),
#                plus every library their ELF files load (debroot)
#
# The rootfs of all three is checked as the filevol image's is (every ELF file's
# libraries resolve, the programs filevol runs start) and `ceph --version` runs in it.
# That its ceph answers a real cluster, and evicts through internal/cephevict, is
# `make images-ceph-test` (test/cephimage, the harness's cluster).

# The packages of layer 3, beside PACKAGES; DEBROOT_ARGS keeps of ceph-common its
# one program. python3-cephfs (libcephfs2) is what `ceph tell mds.*` talks to an MDS
# through (ceph_argparse imports cephfs for it): without it `ceph status` answers but
# the eviction fails with "CephFS unavailable, have you installed libcephfs?" (seen by
# make images-ceph-test).
CEPH_PACKAGES=(ceph-common python3-minimal python3.11-minimal libpython3.11-minimal libpython3.11-stdlib
               python3-rados python3-cephfs python3-ceph-argparse python3-prettytable python3-wcwidth)

# ceph_image: filevol-ceph.tar and filevol-ceph.txt in OUT. Needs W, the filevol binary
# at $W/filevol, version and app (hack/images.sh sets them).
ceph_image() {
  local repo=${FILEVOL_CEPH_REPO:-ghcr.io/filevol/filevol-ceph} B=$W/rootfs R=$W/rootfs-ceph V=$W/verify-ceph f
  rootfs "$HOST_ARCH" "$B" "$W/base.packages.txt"
  local base=("${PACKAGES[@]}")
  PACKAGES+=("${CEPH_PACKAGES[@]}") DEBROOT_ARGS=(-only ceph-common=/usr/bin/ceph) ROOTFS_NAME=ceph-rootfs
  rootfs "$HOST_ARCH" "$R" "$OUT/filevol-ceph.packages.txt"
  PACKAGES=("${base[@]}") DEBROOT_ARGS=() ROOTFS_NAME=
  ceph_layer "$B" "$R" "$W/ceph.layer.tar"
  install -D -m 0755 "$W/filevol" "$R/usr/local/bin/filevol"
  chroot_check "$R"
  ceph_chroot_check "$R"
  rm -r "$R/usr/local/bin/filevol"

  "${TAR[@]}" -C "$B" -cf "$W/debian.tar" .
  mkdir -p "$W/app/usr/local/bin" && install -m 0755 "$W/filevol" "$W/app/usr/local/bin/filevol"
  "${TAR[@]}" -C "$W/app" -cf "$W/filevol.tar" .
  "$W/ociimage" -o "$OUT/filevol-ceph.tar" -layer "$W/debian.tar" -layer "$W/filevol.tar" -layer "$W/ceph.layer.tar" \
    -entrypoint '["/usr/local/bin/filevol"]' -label "org.opencontainers.image.version=$version" \
    -label "org.opencontainers.image.source=https://github.com/filevol/filevol" \
    -tag "$repo:v$app" -tag "$repo:$version"

  # What the tarball really holds: the driver's programs and the CLI's files, in its layers.
  mkdir "$V" && tar -xf "$OUT/filevol-ceph.tar" -C "$V"
  local manifest; manifest=$(jq -r '.manifests[0].digest | sub("sha256:"; "")' "$V/index.json")
  image_files "$V" "$manifest" > "$OUT/filevol-ceph.files.txt"
  for f in sbin/mkfs.ext4 sbin/losetup bin/mount usr/local/bin/filevol usr/bin/ceph usr/bin/python3 usr/bin/python3.11 \
           usr/lib/python3/dist-packages/ceph_argparse.py usr/lib/python3/dist-packages/ceph_daemon.py \
           usr/lib/python3/dist-packages/rados.cpython-311-x86_64-linux-gnu.so \
           usr/lib/python3/dist-packages/cephfs.cpython-311-x86_64-linux-gnu.so usr/lib/x86_64-linux-gnu/libcephfs.so.2 \
           usr/lib/x86_64-linux-gnu/librados.so.2 usr/lib/x86_64-linux-gnu/ceph/libceph-common.so.2; do
    grep -qx "$f" "$OUT/filevol-ceph.files.txt" || die "$f is not in filevol-ceph.tar"
  done
  echo "filevol-ceph.tar $repo:v$app $repo:$version" > "$OUT/filevol-ceph.txt"
  log "done: $OUT/filevol-ceph.tar ($(du -m "$OUT/filevol-ceph.tar" | cut -f1) MB, its own layer $(jq -r '.layers[2].size / 1e6 * 10 | round / 10' "$V/blobs/sha256/$manifest") MB; $(wc -l < "$OUT/filevol-ceph.files.txt") entries)"
}

# ceph_layer BASE FULL OUT: a tarball of what FULL adds to BASE (every directory of
# FULL, every other file BASE lacks). A file both hold must be the same file: the
# two rootfs come from the same package lists.
ceph_layer() {
  local B=$1 R=$2 out=$3
  comm -12 <(cd "$B" && find . ! -type d | sort) <(cd "$R" && find . ! -type d | sort) > "$W/ceph.common.txt"
  while IFS= read -r f; do
    if [ -L "$B/$f" ]; then [ "$(readlink "$B/$f")" = "$(readlink "$R/$f")" ]; else cmp -s "$B/$f" "$R/$f"; fi ||
      die "ceph layer: $f differs from the filevol image's"
  done < "$W/ceph.common.txt"
  { (cd "$R" && find . -type d | sort)
    comm -13 <(cd "$B" && find . ! -type d | sort) <(cd "$R" && find . ! -type d | sort); } > "$W/ceph.layer.txt"
  "${TAR[@]}" --no-recursion -C "$R" -T "$W/ceph.layer.txt" -cf "$out"
  log "ceph layer: $(grep -vc '/$' "$W/ceph.layer.txt") entries beside the filevol rootfs's, $(du -sm --apparent-size "$R" | cut -f1) MB unpacked in all"
}

# ceph_chroot_check R: the CLI starts in the rootfs: its interpreter, its modules and
# librados load (rados.Rados is made, connecting to nothing).
ceph_chroot_check() {
  local R=$1 out
  mkdir -p "$R/dev" && mknod -m 666 "$R/dev/null" c 1 3
  out=$(env -i PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C chroot "$R" ceph --version 2>&1) ||
    die "ceph --version in the image: $out"
  [[ $out == "ceph version "* ]] || die "ceph --version in the image: $out"
  printf '  %-22s %s\n' ceph "$out"
  out=$(env -i PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C chroot "$R" python3 -c \
        'import rados, cephfs, ceph_argparse, ceph_daemon, prettytable; rados.Rados(conf={}); print(rados.__file__, cephfs.__file__)' 2>&1) ||
    die "the ceph CLI's modules in the image: $out"
  printf '  %-22s %s\n' "python3 modules" "$out"
  rm -r "$R/dev"
}
