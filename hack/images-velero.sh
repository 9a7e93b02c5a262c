# shellcheck shell=bash
# Sourced by hack/images.sh --velero (it sets ROOT, OUT, W, TAR, log, die, image_files and
# builds $W/ociimage): the images a Velero backup on the e2e cluster runs, from the
# binaries test/e2e/cluster/velero.sh cached (static, CGO_ENABLED=0), each a single layer:
#
#   velero.tar   docker.io/velero/velero:<VELERO_VERSION>
#       /velero  server, node-agent and CSI data mover. The data-mover pods velero starts
#                run the node-agent DaemonSet's image with the command /velero data-mover
#                backup|restore (pkg/exposer/csi_snapshot.go, generic_restore.go), as user 0
#                (their pod securityContext), with the node-agent's env and volumes.
#       /tmp     1777: velero's temporary files (os.CreateTemp: backup tarballs, the data
#                mover's log), and HOME=/tmp, under which kopia keeps its cache and velero
#                its repository configuration (udmrepo/repo_options.go) when no
#                directory is given.
#       user 65532:65532 for the server, whose Deployment sets no user (the node-agent
#       DaemonSet and the data movers set 0).
#   velero-plugin-for-aws.tar   docker.io/velero/velero-plugin-for-aws:<VELERO_PLUGIN_FOR_AWS_VERSION>
#       /plugins/velero-plugin-for-aws and /cp-plugin, the entrypoint: `velero install
#       --plugins IMAGE` runs the image as an init container of the server with the plugin
#       directory mounted at /target and no command (velero pkg/builder
#       ForPluginContainer), so the image copies its plugin there itself. User 65532:65532.
#
# The names are velero's own so that `velero install` without --image resolves too.
# Neither image holds CA certificates: the harness's store speaks plain HTTP.

velero_images() {
  local vdir b got v img
  # shellcheck source=/dev/null
  source "$ROOT/test/e2e/cluster/versions.env"
  vdir=$("$ROOT/test/e2e/cluster/velero.sh" --print-dir)
  for b in velero velero-plugin-for-aws cp-plugin; do
    [ -x "$vdir/bin/$b" ] || die "$vdir/bin/$b missing: run test/e2e/cluster/velero.sh first"
    readelf -l "$vdir/bin/$b" | grep -q INTERP && die "$vdir/bin/$b is not static"
  done
  got=$("$vdir/bin/velero" version --client-only | awk '/Version:/ {print $2}')
  [ "$got" = "$VELERO_VERSION" ] || die "$vdir/bin/velero says $got, versions.env says $VELERO_VERSION"
  rm -f "$OUT/velero.tar" "$OUT/velero-plugin-for-aws.tar" "$OUT/velero-images.txt"

  mkdir -p "$W/velero/tmp" && chmod 1777 "$W/velero/tmp"
  install -m 0755 "$vdir/bin/velero" "$W/velero/velero"
  "${TAR[@]}" -C "$W/velero" -cf "$W/velero.layer.tar" .
  "$W/ociimage" -o "$OUT/velero.tar" -layer "$W/velero.layer.tar" -entrypoint '["/velero"]' \
    -user 65532:65532 -env HOME=/tmp -label "org.opencontainers.image.version=$VELERO_VERSION" \
    -tag "docker.io/velero/velero:$VELERO_VERSION"

  mkdir -p "$W/plugin/plugins"
  install -m 0755 "$vdir/bin/velero-plugin-for-aws" "$W/plugin/plugins/velero-plugin-for-aws"
  install -m 0755 "$vdir/bin/cp-plugin" "$W/plugin/cp-plugin"
  "${TAR[@]}" -C "$W/plugin" -cf "$W/plugin.layer.tar" .
  "$W/ociimage" -o "$OUT/velero-plugin-for-aws.tar" -layer "$W/plugin.layer.tar" \
    -entrypoint '["/cp-plugin","/plugins/velero-plugin-for-aws","/target/velero-plugin-for-aws"]' \
    -user 65532:65532 -label "org.opencontainers.image.version=$VELERO_PLUGIN_FOR_AWS_VERSION" \
    -tag "docker.io/velero/velero-plugin-for-aws:$VELERO_PLUGIN_FOR_AWS_VERSION"

  # What each tarball really holds: its files, and the config the runtime reads.
  velero_check "$OUT/velero.tar" "tmp/ velero" '["/velero"]' 65532:65532 HOME=/tmp
  velero_check "$OUT/velero-plugin-for-aws.tar" "cp-plugin plugins/ plugins/velero-plugin-for-aws" \
    '["/cp-plugin","/plugins/velero-plugin-for-aws","/target/velero-plugin-for-aws"]' 65532:65532 ""
  for v in "velero.tar docker.io/velero/velero:$VELERO_VERSION" \
           "velero-plugin-for-aws.tar docker.io/velero/velero-plugin-for-aws:$VELERO_PLUGIN_FOR_AWS_VERSION"; do
    echo "$v" >> "$OUT/velero-images.txt"
  done
  for img in velero velero-plugin-for-aws; do
    log "  $img.tar: $(du -m "$OUT/$img.tar" | cut -f1) MB, $(wc -l < "$OUT/$img.files.txt") entries (list: $OUT/$img.files.txt)"
  done
  log "done: $OUT/velero-images.txt"
}

# velero_check TARBALL "FILES" ENTRYPOINT USER ENV: the image holds exactly FILES (a
# trailing / for a directory; /tmp must be 1777), and its config says ENTRYPOINT, USER and
# (when not empty) the ENV entry.
velero_check() {
  local tarball=$1 files=$2 entrypoint=$3 user=$4 env=$5 V manifest cfg got want name
  name=$(basename "$tarball" .tar)
  V=$W/verify-$name; mkdir "$V" && tar -xf "$tarball" -C "$V"
  manifest=$(jq -r '.manifests[0].digest | sub("sha256:"; "")' "$V/index.json")
  image_files "$V" "$manifest" > "$OUT/$name.files.txt"
  got=$(tr '\n' ' ' < "$OUT/$name.files.txt"); want=$(tr ' ' '\n' <<<"$files" | sort | tr '\n' ' ')
  [ "$got" = "$want" ] || die "$name.tar holds [$got], want [$want]"
  if [[ " $files " == *" tmp/ "* ]]; then
    got=$(tar -tvzf "$V/blobs/sha256/$(jq -r '.layers[0].digest | sub("sha256:"; "")' "$V/blobs/sha256/$manifest")" ./tmp/ | awk '{print $1; exit}')
    [ "$got" = drwxrwxrwt ] || die "$name.tar: /tmp is $got, want drwxrwxrwt"
  fi
  cfg=$V/blobs/sha256/$(jq -r '.config.digest | sub("sha256:"; "")' "$V/blobs/sha256/$manifest")
  [ "$(jq -c .config.Entrypoint "$cfg")" = "$entrypoint" ] || die "$name.tar: entrypoint $(jq -c .config.Entrypoint "$cfg"), want $entrypoint"
  [ "$(jq -r .config.User "$cfg")" = "$user" ] || die "$name.tar: user $(jq -r .config.User "$cfg"), want $user"
  [ -z "$env" ] || jq -e --arg e "$env" '.config.Env | index($e)' "$cfg" >/dev/null || die "$name.tar: no $env in $(jq -c .config.Env "$cfg")"
  log "$name.tar: $(tr '\n' ' ' < "$OUT/$name.files.txt")| entrypoint $(jq -c .config.Entrypoint "$cfg") | user $user$([ -z "$env" ] || echo " | $env")"
}
