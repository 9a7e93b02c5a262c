#!/usr/bin/env bash
# test/e2e/quickstart/quickstart.sh: the README's "Quick start (on a cluster)", done on
# the e2e cluster as a user does it on theirs, in the README's order, with nothing the
# harness prepared for filevol:
#
#   1. the cluster as a fresh one is: no filevol release, no VolumeSnapshot CRDs, no
#      snapshot-controller, and none of filevol's or its sidecars' images in containerd;
#   2. a registry (hack/tools/cmd/registry) on 127.0.0.1, the driver's image built and
#      pushed with the documented targets (make image, make push REGISTRY=...); the
#      sidecars' images, which a user's nodes pull from registry.k8s.io, are pushed there
#      too, and containerd mirrors registry.k8s.io to it (the cluster has no network);
#   3. kubectl create namespace, label, helm install with the documented values only: the
#      image's repository, and what docs/quickstart.md says a cluster without kube-proxy
#      and without the registrar's images needs; the install's notes say snapshots were
#      left out, and nothing of them is rendered;
#   4. a claim and a pod with data;
#   5. the CRDs and a snapshot-controller installed, helm upgrade: snapshots turn on;
#      a VolumeSnapshot of the claim, a claim restored from it, the same bytes in it;
#   6. every container of the release runs an image whose digest this registry served.
#
# Called by test/e2e/run.sh last (it uninstalls the e2e release), or on a cluster left up
# with E2E_KEEP=1. Prints "--- PASS: QuickStart/STEP" or "--- FAIL: ..." per step (the
# run's summary counts them); logs in _output/e2e/quickstart/. What it starts is recorded
# for down.sh (record_pid), which stops it with the cluster.
set -Eeuo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../cluster/lib.sh"
[ "$(id -u)" = 0 ] || die "quickstart.sh must run as root"

ROOT=$REPO_ROOT
OUT=$LOG_DIR/quickstart
REG=${E2E_REGISTRY:-127.0.0.1:5000}
HELM=$ROOT/_output/tools/helm
CHART_SH=$ROOT/hack/tools/e2e/chart.sh
export KUBECONFIG=$ADMIN_KUBECONFIG
K=("$KUBECTL")
NS=filevol
# Under the cluster's state directory: down.sh detaches loop devices backed there.
POOL=$STATE_DIR/quickstart-pool
# containerd_config's config_path (lib.sh): one hosts.toml per registry.
CERTS=$STATE_DIR/containerd/certs.d
rm -rf "$OUT" && mkdir -p "$OUT"

step=""
t0=0
begin() { step=$1; t0=$(date +%s); log "QuickStart/$step"; }
pass() { echo "--- PASS: QuickStart/$step ($(( $(date +%s) - t0 ))s)"; }
why=""
# The FAIL line says why: fail's reason, or the command that failed and its line.
trap 'rc=$?; [ -n "$step" ] && echo "--- FAIL: QuickStart/$step ($(( $(date +%s) - t0 ))s, exit $rc): ${why:-line $LINENO: $BASH_COMMAND} (logs in $OUT)"; exit $rc' ERR
fail() { why="$*"; false; }

# ---- 1. a cluster as a user's fresh one ---------------------------------------------------
begin fresh-cluster
# Snapshots go first, while their driver and the snapshot-controller still run: a content's
# finalizer is theirs to remove, and a CRD with objects left is not deleted.
"${K[@]}" delete volumesnapshots --all -A --wait --timeout 120s >/dev/null 2>&1 || true
"${K[@]}" delete volumegroupsnapshots --all -A --wait --timeout 120s >/dev/null 2>&1 || true
if "$HELM" status filevol -n "$NS" >/dev/null 2>&1; then "$CHART_SH" uninstall > "$OUT/uninstall.log" 2>&1; fi
"${K[@]}" delete namespace "$NS" --ignore-not-found --wait --timeout 120s >/dev/null
# What no driver is left to delete (a Retain policy, a content of a test that failed).
for kind in volumesnapshotcontents volumegroupsnapshotcontents; do
  for o in $("${K[@]}" get "$kind" -o name 2>/dev/null | grep -E '^[a-z.]+/[^ ]+$' || true); do
    "${K[@]}" patch "$o" --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null
  done
done
"${K[@]}" delete -f "$KEY_DIR/crd/" --ignore-not-found --wait --timeout 120s >/dev/null
# (and the registry of an earlier run of this script on the same cluster, E2E_KEEP=1)
while read -r n p st; do
  if [[ $n =~ ^(snapshot-controller|registry)$ ]] && [ "$(proc_start "$p" || true)" = "$st" ]; then
    kill -TERM "$p" && log "stopped $n (pid $p)"
  fi
done < "$PIDS_FILE"
# Every image of filevol and its sidecars goes: the install below must pull each one.
ours() { ctr --address "$CONTAINERD_SOCK" -n k8s.io images ls -q | grep -E "^$REG/|/filevol/filevol|/sig-storage/" || true; }
# shellcheck disable=SC2046
ctr --address "$CONTAINERD_SOCK" -n k8s.io images rm $(ours) >/dev/null 2>&1 || true
[ -z "$(ours)" ] || fail "images still in containerd: $(ours | tr '\n' ' ')"
[ -z "$("${K[@]}" api-resources --api-group=snapshot.storage.k8s.io -o name)" ] || fail "the VolumeSnapshot API is still served"
pass

# ---- 2. a registry; the images pushed as the README says ----------------------------------
begin registry-and-push
(cd "$ROOT/hack/tools" && go build -o "$OUT/registry" ./cmd/registry && go build -o "$OUT/ociimage" ./cmd/ociimage)
setsid "$OUT/registry" -addr "$REG" -log "$OUT/registry.log" < /dev/null > "$OUT/registry.out" 2>&1 8>&- &
record_pid registry $!
for _ in $(seq 40); do curl -sf "http://$REG/v2/" >/dev/null && break; sleep 0.25; done
curl -sf "http://$REG/v2/" >/dev/null || fail "the registry does not answer on $REG: $(cat "$OUT/registry.out")"
# The nodes pull registry.k8s.io's images from it (a user's nodes reach registry.k8s.io),
# and plain HTTP from it (make push: a registry on localhost needs no INSECURE).
mkdir -p "$CERTS/registry.k8s.io" "$CERTS/$REG"
printf 'server = "https://registry.k8s.io"\n[host."http://%s"]\n  capabilities = ["pull", "resolve"]\n' "$REG" \
  > "$CERTS/registry.k8s.io/hosts.toml"
printf 'server = "http://%s"\n[host."http://%s"]\n  capabilities = ["pull", "resolve", "push"]\n' "$REG" "$REG" \
  > "$CERTS/$REG/hosts.toml"
make -C "$ROOT" --no-print-directory image > "$OUT/make-image.log" 2>&1 || fail "make image: $(tail -n 20 "$OUT/make-image.log")"
make -C "$ROOT" --no-print-directory push REGISTRY="$REG/filevol" > "$OUT/make-push.log" 2>&1 || fail "make push: $(tail -n 20 "$OUT/make-push.log")"
while read -r tar ref; do
  case $ref in registry.k8s.io/*) "$OUT/ociimage" push "$ROOT/_output/images/$tar" "$REG/${ref#registry.k8s.io/}" >> "$OUT/mirror.log" ;; esac
done < "$ROOT/_output/images/images.txt"
pass

# ---- 3. helm install with the documented values ------------------------------------------
begin install-without-snapshot-crds
# The README's lines; the --set lines after the first are docs/quickstart.md's for a
# cluster like this one (no kube-proxy: the API server's address and the host's network;
# no node-driver-registrar or livenessprobe image built: builtin) and its pool's place.
# Only what the registry serves from here on counts (make push reads back what it pushed).
mark=$(wc -l < "$OUT/registry.log")
"${K[@]}" create namespace "$NS" >/dev/null
"${K[@]}" label namespace "$NS" pod-security.kubernetes.io/enforce=privileged >/dev/null
values=(--set "image.filevol.repository=$REG/filevol"
  --set registrar=builtin --set livenessProbe=builtin
  --set apiServer.host=127.0.0.1 --set apiServer.port=6443 --set node.hostNetwork=true --set controller.hostNetwork=true
  --set "pool.hostPath=$POOL")
"$HELM" install filevol "$ROOT/charts/filevol" --namespace "$NS" "${values[@]}" > "$OUT/install.txt"
"${K[@]}" -n "$NS" rollout status daemonset/filevol-node --timeout 300s >> "$OUT/install.txt"
"${K[@]}" -n "$NS" rollout status deployment/filevol-controller --timeout 300s >> "$OUT/install.txt"
grep -q 'Snapshots left out' "$OUT/install.txt" || fail "the install's notes do not say that snapshots were left out: $OUT/install.txt"
"$HELM" get manifest filevol -n "$NS" > "$OUT/manifest-1.yaml"
! grep -qE '^kind: VolumeSnapshotClass|^ *image: .*csi-snapshotter' "$OUT/manifest-1.yaml" || fail "snapshot objects rendered without the CRDs ($OUT/manifest-1.yaml)"
pass

# ---- 4. a claim and a pod with data -------------------------------------------------------
begin claim-and-pod
pod() { # NAME CLAIM COMMAND
  cat <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: default}
spec:
  containers:
    - name: app
      image: $BUSYBOX_TAG
      imagePullPolicy: IfNotPresent
      command: ["sh", "-c", "$3 && sleep 3600"]
      volumeMounts: [{name: data, mountPath: /data}]
  volumes:
    - name: data
      persistentVolumeClaim: {claimName: $2}
EOF
}
"${K[@]}" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: demo, namespace: default}
spec:
  storageClassName: filevol
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
EOF
pod demo demo 'head -c 16777216 /dev/urandom > /data/blob && sync && sha256sum /data/blob > /data/sum' | "${K[@]}" apply -f - >/dev/null
"${K[@]}" wait --for=condition=Ready pod/demo --timeout 300s >/dev/null
for _ in $(seq 60); do "${K[@]}" exec demo -- test -s /data/sum 2>/dev/null && break; sleep 1; done
sum=$("${K[@]}" exec demo -- cat /data/sum | cut -d' ' -f1)
[ ${#sum} = 64 ] || fail "no checksum written in the pod: '$sum'"
log "16 MiB written, sha256 $sum"
pass

# ---- 5. the CRDs, helm upgrade, a snapshot and a restore ----------------------------------
begin snapshots-after-upgrade
"${K[@]}" apply --server-side -f "$KEY_DIR/crd/" >/dev/null
"${K[@]}" wait --for=condition=Established --timeout 60s crd/volumesnapshots.snapshot.storage.k8s.io \
  crd/volumesnapshotcontents.snapshot.storage.k8s.io crd/volumesnapshotclasses.snapshot.storage.k8s.io >/dev/null
# The snapshot-controller as its README starts it (the chart's per-node csi-snapshotter
# needs --enable-distributed-snapshotting).
setsid "$BIN_DIR/snapshot-controller" --kubeconfig="$ADMIN_KUBECONFIG" --leader-election=false \
  --enable-distributed-snapshotting --v=2 < /dev/null > "$OUT/snapshot-controller.log" 2>&1 8>&- &
record_pid snapshot-controller $!
"$HELM" upgrade filevol "$ROOT/charts/filevol" --namespace "$NS" --reuse-values > "$OUT/upgrade.txt"
"${K[@]}" -n "$NS" rollout status daemonset/filevol-node --timeout 300s >> "$OUT/upgrade.txt"
"$HELM" get manifest filevol -n "$NS" > "$OUT/manifest-2.yaml"
grep -q '^kind: VolumeSnapshotClass' "$OUT/manifest-2.yaml" || fail "helm upgrade with the CRDs rendered no VolumeSnapshotClass"
! grep -q 'Snapshots left out' "$OUT/upgrade.txt" || fail "the upgrade's notes still say snapshots were left out"
"${K[@]}" apply -f - >/dev/null <<EOF
apiVersion: snapshot.storage.k8s.io/v1
kind: VolumeSnapshot
metadata: {name: demo, namespace: default}
spec:
  volumeSnapshotClassName: filevol
  source: {persistentVolumeClaimName: demo}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: demo-restored, namespace: default}
spec:
  storageClassName: filevol
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
  dataSource: {apiGroup: snapshot.storage.k8s.io, kind: VolumeSnapshot, name: demo}
EOF
"${K[@]}" wait --for=jsonpath='{.status.readyToUse}'=true volumesnapshot/demo --timeout 300s >/dev/null
pod demo-restored demo-restored 'sha256sum /data/blob > /data/restored-sum' | "${K[@]}" apply -f - >/dev/null
"${K[@]}" wait --for=condition=Ready pod/demo-restored --timeout 300s >/dev/null
for _ in $(seq 60); do "${K[@]}" exec demo-restored -- test -s /data/restored-sum 2>/dev/null && break; sleep 1; done
got=$("${K[@]}" exec demo-restored -- cat /data/restored-sum | cut -d' ' -f1)
[ "$got" = "$sum" ] || fail "the restored claim's blob has sha256 '$got', the original '$sum'"
pass

# ---- 6. every image came from the registry ------------------------------------------------
begin images-from-the-registry
served=$(tail -n +$((mark + 1)) "$OUT/registry.log" |
  awk '$3 ~ /^(GET|HEAD)$/ && $4 ~ /\/manifests\// && $5 == 200 {print $6}' | sort -u)
"${K[@]}" -n "$NS" get pods -o jsonpath='{range .items[*]}{range .status.containerStatuses[*]}{.image} {.imageID}{"\n"}{end}{end}' \
  | sort -u > "$OUT/images-run.txt"
[ -s "$OUT/images-run.txt" ] || fail "no container runs in namespace $NS"
while read -r image id; do
  grep -qx "${id##*@}" <<<"$served" || fail "$image runs as $id, which the registry on $REG never served (registry.log)"
done < "$OUT/images-run.txt"
grep -q "$REG/filevol" "$OUT/images-run.txt" || fail "no container runs $REG/filevol"
log "$(wc -l < "$OUT/images-run.txt") images, each pulled from $REG: $(cut -d' ' -f1 "$OUT/images-run.txt" | tr '\n' ' ')"
pass

# ---- cleanup: what this story made, before down.sh ----------------------------------------
begin cleanup
"${K[@]}" delete pod demo demo-restored --wait --timeout 120s >/dev/null
"${K[@]}" delete volumesnapshot demo --wait --timeout 120s >/dev/null
pvs=$("${K[@]}" get pvc demo demo-restored -o jsonpath='{range .items[*]}pv/{.spec.volumeName} {end}')
"${K[@]}" delete pvc demo demo-restored --wait --timeout 120s >/dev/null
# The driver deletes the volumes (reclaim policy Delete) before it is uninstalled.
# shellcheck disable=SC2086
"${K[@]}" wait --for=delete $pvs --timeout 120s >/dev/null 2>&1 || [ -z "$("${K[@]}" get $pvs -o name --ignore-not-found)" ]
"$HELM" uninstall filevol -n "$NS" --wait --timeout 5m >/dev/null
pass
step=""
