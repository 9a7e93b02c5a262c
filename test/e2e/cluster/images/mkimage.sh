#!/usr/bin/env bash
# mkimage.sh OUT.tar ROOTFS_DIR ENTRYPOINT_JSON CMD_JSON TAG [TAG...]
# Writes a single-layer docker-archive ("docker save" format) tarball, importable with
# `ctr -n k8s.io images import`. No Docker, no registry. Output is reproducible
# (fixed mtimes, numeric root ownership, sorted entries).
set -euo pipefail
out=$(realpath -m "$1"); rootfs=$2; ep=$3; cmd=$4; shift 4
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
tar --numeric-owner --owner=0 --group=0 --sort=name --mtime='2025-01-01' -C "$rootfs" -cf "$w/layer.tar" .
diff=$(sha256sum "$w/layer.tar" | cut -d' ' -f1)
cat > "$w/config.json" <<EOC
{"architecture":"amd64","os":"linux","created":"2025-01-01T00:00:00Z",
 "config":{"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],"Entrypoint":$ep,"Cmd":$cmd,"WorkingDir":"/"},
 "rootfs":{"type":"layers","diff_ids":["sha256:$diff"]},"history":[{"created":"2025-01-01T00:00:00Z","created_by":"filevol test/e2e/cluster/images/mkimage.sh"}]}
EOC
cfg=$(sha256sum "$w/config.json" | cut -d' ' -f1)
mv "$w/config.json" "$w/$cfg.json"
mkdir "$w/$diff" && mv "$w/layer.tar" "$w/$diff/layer.tar"
tags=$(printf '"%s",' "$@"); tags="[${tags%,}]"
echo "[{\"Config\":\"$cfg.json\",\"RepoTags\":$tags,\"Layers\":[\"$diff/layer.tar\"]}]" > "$w/manifest.json"
tar --mtime='2025-01-01' --owner=0 --group=0 -C "$w" -cf "$out.tmp" manifest.json "$cfg.json" "$diff"
mv -f "$out.tmp" "$out"
echo "  image $(basename "$out") ($(du -h "$out" | cut -f1)): $*"
