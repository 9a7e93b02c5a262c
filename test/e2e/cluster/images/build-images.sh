#!/usr/bin/env bash
# build-images.sh KUBE_SRC_DIR AGNHOST_BIN OUT_DIR
# Builds the images the e2e suite needs, without Docker or a registry:
#   pause.tar    pause from kubernetes' own build/pause/linux/pause.c (gcc -static)
#   busybox.tar  Debian's busybox-static; also tagged as the e2e nginx image, which the
#                storage suites only use for `sh -c`
#   glibc-dns-testing.tar  e2e-test-images/glibc-dns-testing: GNU coreutils and dash
#                from Debian bookworm (debroot, hack/debian-bookworm.sh) on the busybox
#                rootfs. The storage suites run GNU dd in it (multivolume: `dd
#                oflag=nocache`, `iflag=direct`), which busybox's dd refuses; /bin/sh is
#                dash, since busybox's sh runs its own applets before anything on the PATH
#   agnhost.tar  agnhost built from the kubernetes module, on the busybox rootfs, with
#                the nsenter shim (see nsenter-shim.sh)
set -euo pipefail
kube=$1; agnhost=$2; out=$3
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../../.." && pwd)
source "$here/../versions.env"
source "$repo/hack/debian-bookworm.sh"
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
mkdir -p "$out"

gcc -Os -static -DVERSION="${PAUSE_TAG##*:}-filevol" -o "$w/pause" "$kube/build/pause/linux/pause.c"
mkdir -p "$w/rootfs-pause" && cp "$w/pause" "$w/rootfs-pause/pause"
p=${PAUSE_TAG%:*}
"$here/mkimage.sh" "$out/pause.tar" "$w/rootfs-pause" '["/pause"]' 'null' \
  "$PAUSE_TAG" "$p:3.10.1" "$p:3.10"

r=$w/rootfs-busybox
mkdir -p "$r"/{bin,sbin,usr/bin,usr/sbin,tmp,etc,proc,sys,dev,root,var}
cp /bin/busybox "$r/bin/busybox"
for a in $(/bin/busybox --list-full); do [ -e "$r/$a" ] || ln -s /bin/busybox "$r/$a"; done
chmod 1777 "$r/tmp"
echo 'root:x:0:0:root:/root:/bin/sh' > "$r/etc/passwd"
echo 'root:x:0:' > "$r/etc/group"
"$here/mkimage.sh" "$out/busybox.tar" "$r" 'null' '["sh"]' \
  "$BUSYBOX_TAG" docker.io/library/busybox:latest registry.k8s.io/e2e-test-images/nginx:1.15-4

# GNU coreutils, dash as /bin/sh, and exactly the libraries they load, from bookworm
# whatever the host's apt says; busybox fills in every other command, never shadowing a
# GNU one on the PATH. Not busybox's sh: it would run its own dd whatever the PATH says.
images_cache=${FILEVOL_IMAGES_CACHE:-/var/cache/filevol-images}
bookworm_apt "$images_cache" --if-missing
(cd "$repo/hack/tools" && go build -o "$w/debroot" ./cmd/debroot)
g=$w/rootfs-glibc
"$w/debroot" -debs "$images_cache/debs" -out "$g" -list "$out/glibc-dns-testing.packages.txt" coreutils dash >/dev/null
rm -rf "$g"/usr/share/{man,info,locale,doc}
mkdir -p "$g"/{bin,sbin,usr/bin,usr/sbin,tmp,etc,proc,sys,dev,root,var}
cp /bin/busybox "$g/bin/busybox"
for a in $(/bin/busybox --list-full); do
  n=${a##*/}
  [ -e "$g/bin/$n" ] || [ -e "$g/usr/bin/$n" ] || [ -e "$g/sbin/$n" ] || [ -e "$g/usr/sbin/$n" ] || ln -s /bin/busybox "$g/$a"
done
chmod 1777 "$g/tmp"
cp "$r/etc/passwd" "$r/etc/group" "$g/etc/"
for c in dd sha256sum base64; do   # what the suites run there, through sh -c: GNU's
  v=$(chroot "$g" /bin/sh -c "$c --version" 2>&1 || true)
  [[ $v == *"coreutils) "* ]] || { echo "glibc-dns-testing: sh -c '$c' is not GNU coreutils: $v" >&2; exit 1; }
done
"$here/mkimage.sh" "$out/glibc-dns-testing.tar" "$g" 'null' '["sh"]' \
  registry.k8s.io/e2e-test-images/glibc-dns-testing:2.0.0

a=$w/rootfs-agnhost
cp -a "$r" "$a"
cp "$agnhost" "$a/agnhost"
mkdir -p "$a/usr/local/bin" && cp "$here/nsenter-shim.sh" "$a/usr/local/bin/nsenter" && chmod 755 "$a/usr/local/bin/nsenter"
"$here/mkimage.sh" "$out/agnhost.tar" "$a" '["/agnhost"]' '["pause"]' \
  "registry.k8s.io/e2e-test-images/agnhost:$AGNHOST_VERSION" registry.k8s.io/e2e-test-images/agnhost:2.55
