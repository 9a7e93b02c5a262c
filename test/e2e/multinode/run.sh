#!/usr/bin/env bash
# make e2e-multinode: filevol on a real three-node Kubernetes on this machine.
#
#   1. build (cached): cluster binaries, bin/filevol, images, the stories test binary;
#   1b. with MN_KILLED_RUN=1 (make e2e-multinode-killed runs it alone), killed-run.sh (67 s on a
#      quiet machine, 353 s under a load of 20): a run of this script SIGKILLed
#      once its nodes, GlusterFS and directory pool are up, and the clean-up the next run
#      does (clean.sh) proved to leave nothing;
#   2. up.sh (FILEVOL_E2E_MULTINODE=1): control plane and node vm; its pool is a tmpfs of
#      MN_POOL_VM MiB on the host; node.sh up n2 / n3: nodes in namespaces of their own,
#      pools of MN_POOL_N2 / MN_POOL_N3 MiB; a zone label per node;
#   3. helm install (values-e2e.yaml + values.yaml here): node DaemonSet on all three
#      nodes, controller Deployment (2 replicas, leader election);
#   4. the stories (go test -tags e2e ./test/e2e/multinode), logs in _output/e2e-multinode;
#   5. the upstream External Storage suite, the tests only several nodes can run (MN_SUITE,
#      node-local topology, shared image volumes moving, RWX directory volumes from several nodes;
#      below; test/e2e/README.md, "The suite on three nodes"), logs and junit in
#      _output/e2e-multinode/suite/;
#   6. clean.sh, always (down.sh, which takes the nodes down first, and the run's directories).
#
# Holds $STATE_DIR/run.lock throughout (the single-node run.sh takes the same lock).
# Knobs: MN_RUN=regexp (go test -run); MN_BUILD_ONLY=1 (step 1 only), MN_SKIP_BUILD=1 (use what
# the last build left); FILEVOL_E2E_LOCK_HELD=1 (the caller holds the lock: several runs in a row
# under one `flock $STATE_DIR/run.lock`); MN_HOLD=FILE (debugging: keep the cluster and the lock
# until FILE exists, then tear down); MN_KEEP=1 (leave the cluster up; make cluster-down);
# MN_KILLED_RUN=1 (step 1b); MN_OUT=DIR (logs elsewhere than _output/e2e-multinode: killed-run.sh's run); MN_STOP_AFTER=dir-pool
# (stop once the directory pool is mounted on every node, before the install) or install (once
# filevol is installed and the GlusterFS clients mounted: killed-run.sh).
# MN_SUITE=default (CI: topology of the node-local driver, volumes moving between nodes on
# the shared one), full (also [Disruptive] on both drivers, one at a time, over the
# nodes' sshds; MN_DISRUPTIVE=local or shared: one driver's only), none (no suite);
# MN_STORIES=0 leaves the stories out.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../cluster/lib.sh"
[ "$(id -u)" = 0 ] || die "run.sh must run as root"
OUT=${MN_OUT:-$REPO_ROOT/_output/e2e-multinode}
# The cluster's logs go with this run's, not over the single-node run's.
export FILEVOL_E2E_LOGS=$OUT
LOG_DIR=$OUT
MN_POOL_VM=${MN_POOL_VM:-1536} MN_POOL_N2=${MN_POOL_N2:-512} MN_POOL_N3=${MN_POOL_N3:-1024}
NODES=("n2 10.89.1.2 zone-b $MN_POOL_N2" "n3 10.89.1.3 zone-c $MN_POOL_N3")
POOL=$STATE_DIR/pool
# gluster.sh's server address and volume, and where every node mounts it (values.yaml).
GL_IP=10.89.1.250 GL_VOL=fvmn SHARED_POOL=$STATE_DIR/shared-pool GL_TLS_DIR=$STATE_DIR/shared-pool-tls
MOUNTS=
# ceph.sh's CephFS: its configuration, where every node mounts it (values-ceph.yaml), the
# stories' reader; the second release (values-ceph.yaml) installed beside the first.
CEPH_CONF=$STATE_DIR/ceph/ceph.conf CEPH_MNT=$STATE_DIR/cephfs CEPH_READER=$STATE_DIR/ceph/reader
CEPH_UP= CEPH_INSTALL=
# The directory pool (values.yaml sharedPool.dirPool): a btrfs in this file, mounted here.
DIR_POOL=$STATE_DIR/dir-pool
K=("$KUBECTL" --kubeconfig "$ADMIN_KUBECONFIG")
T0=$(date +%s)
since() { echo $(( $(date +%s) - T0 )); }
SUMMARY=()
note() { SUMMARY+=("$*"); log "$*"; }

mkdir -p "$OUT/bin"
MN_SUITE=${MN_SUITE:-default} MN_STORIES=${MN_STORIES:-1}
case $MN_SUITE in default|full|none) ;; *) die "MN_SUITE=$MN_SUITE: want default, full or none" ;; esac
# Counted over the stories and the suite (suite_pass adds to them), for the closing line.
PASSED=0 FAILED=0 failed=()

finish() {
  local rc=$?
  set +e
  trap - EXIT INT TERM
  declare -F suite_stop >/dev/null && suite_stop
  if [ -n "$CHILD" ] && kill -0 "$CHILD" 2>/dev/null; then kill -TERM "$CHILD"; wait "$CHILD"; fi
  # The shared pool's mounts, if still waiting: before the clean-up, or they would mount after it.
  if [ -n "$MOUNTS" ]; then pkill -TERM -P "$MOUNTS" 2>/dev/null; kill -TERM "$MOUNTS" 2>/dev/null; wait "$MOUNTS" 2>/dev/null; fi
  for p in $CEPH_UP $CEPH_INSTALL; do kill -TERM "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  # Before the lock (the builds), the cluster on this state dir is someone else's: touch nothing.
  if [ -z "${TL:-}" ]; then
    note "total: $(since)s, exit $rc (before the cluster)"
    exit "$rc"
  fi
  # The filevol pods' logs, from each node's kubelet log directory (down.sh removes them).
  mkdir -p "$OUT/driver"
  for d in "$STATE_DIR/pod-logs" "$STATE_DIR"/nodes/*/pod-logs; do
    compgen -G "$d/filevol_*" >/dev/null || continue
    n=vm; [[ $d == */nodes/* ]] && n=$(basename "$(dirname "$d")")
    mkdir -p "$OUT/driver/$n" && cp -r "$d"/filevol_* "$OUT/driver/$n/"
  done
  if [ -n "${MN_HOLD:-}" ]; then
    # Debugging: keep the cluster (and the lock) until the file MN_HOLD exists (30 min at most).
    log "MN_HOLD: the cluster stays up until $MN_HOLD exists (KUBECONFIG=$ADMIN_KUBECONFIG)"
    for ((i = 0; i < 1800; i++)); do [ -e "$MN_HOLD" ] && break; sleep 1; done
  fi
  if [ "${MN_KEEP:-0}" = 1 ]; then
    log "MN_KEEP=1: the cluster stays up (KUBECONFIG=$ADMIN_KUBECONFIG); make cluster-down when done"
  else
    local t=$(date +%s)
    "$HERE/clean.sh"
    note "cluster-down: $(( $(date +%s) - t ))s"
    if [ -s "$OUT/detached-loops.txt" ]; then
      note "LEAK: $(wc -l < "$OUT/detached-loops.txt") loop device(s) left attached: $(tr '\n' ';' < "$OUT/detached-loops.txt")"
      [ "$rc" != 0 ] || rc=1
    fi
  fi
  [ "$rc" = 0 ] || [ "$FAILED" -gt 0 ] || FAILED=1
  note "total: $(since)s (with the lock: $(( $(date +%s) - ${TL:-$(date +%s)} ))s), $PASSED passed, $FAILED failed, exit $rc"
  printf '%s\n' "${SUMMARY[@]}" > "$OUT/summary.txt"
  echo "==== e2e-multinode summary (also in $OUT/summary.txt)"; printf '  %s\n' "${SUMMARY[@]}"
  exit "$rc"
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- 1. build ------------------------------------------------------------------------------
if [ "${MN_SKIP_BUILD:-0}" != 1 ]; then
"$CLUSTER_DIR/install-packages.sh" >/dev/null
"$CLUSTER_DIR/build.sh" >/dev/null
"$CLUSTER_DIR/snapshot-metadata.sh" >/dev/null
make -C "$REPO_ROOT" --no-print-directory build >/dev/null
(cd "$REPO_ROOT" && go test -c -tags e2e -o "$OUT/bin/multinode.test" ./test/e2e/multinode &&
  go build -o "$OUT/bin/capprobe" ./test/e2e/capprobe)
"$REPO_ROOT/hack/images.sh" "$REPO_ROOT/_output/images" > "$OUT/images.log" 2>&1 || die "hack/images.sh failed: $(tail -20 "$OUT/images.log")"
# The CephFS release's controller runs filevol-ceph (values-ceph.yaml: cephCLI), imported
# on every node with the rest (images.txt, which node.sh reads too).
"$REPO_ROOT/hack/images.sh" --ceph "$REPO_ROOT/_output/images" > "$OUT/images-ceph.log" 2>&1 ||
  die "hack/images.sh --ceph failed: $(tail -20 "$OUT/images-ceph.log")"
cat "$REPO_ROOT/_output/images/filevol-ceph.txt" >> "$REPO_ROOT/_output/images/images.txt"
note "build: $(since)s"
fi
[ "${MN_BUILD_ONLY:-0}" != 1 ] || exit 0

# The lock from here to the end (the cluster's whole life); the builds above need none.
mkdir -p "$STATE_DIR"
exec 8>"$STATE_DIR/run.lock"
if [ "${FILEVOL_E2E_LOCK_HELD:-0}" = 1 ]; then
  log "e2e-multinode: FILEVOL_E2E_LOCK_HELD=1: the caller holds $STATE_DIR/run.lock"
elif ! flock -n 8; then
  log "e2e-multinode: another e2e run is using $STATE_DIR; waiting for it to end"
  flock 8
fi
TL=$(date +%s)
# The last run's logs to prev/, once the lock is ours: a run waiting for it must not move the
# logs of the run that holds it.
rm -rf "$OUT/prev"; mkdir -p "$OUT/prev"
for f in stories.log summary.txt install.log install-restarts killed-run.log driver cluster suite testdriver.yaml testdriver-shared.yaml testdriver-dir.yaml; do [ -e "$OUT/$f" ] && mv "$OUT/$f" "$OUT/prev/"; done

# ---- 1b. a killed run, and its clean-up proved complete ------------------------------------
# Not in killed-run.sh's own run of this script (MN_STOP_AFTER), which it kills.
if [ "${MN_KILLED_RUN:-0}" = 1 ] && [ -z "${MN_STOP_AFTER:-}" ]; then
  t=$(date +%s)
  FILEVOL_E2E_LOCK_HELD=1 fg "$HERE/killed-run.sh" > "$OUT/killed-run.log" 2>&1 ||
    die "killed-run.sh: the clean-up after a killed run left something: $(tail -n 15 "$OUT/killed-run.log")"
  note "killed run cleaned, nothing left: $(( $(date +%s) - t ))s ($(grep -o 'killed [0-9]*s in' "$OUT/killed-run.log"))"
fi

# ---- 2. cluster ----------------------------------------------------------------------------
t=$(date +%s)
# What a killed run left (the next run's clean-up; killed-run.sh proves it complete).
FILEVOL_E2E_GRACEFUL=0 fg "$HERE/clean.sh"
rm -f "$OUT/detached-loops.txt"
FILEVOL_E2E_MULTINODE=1 fg "$CLUSTER_DIR/up.sh"
# vm's pool: a tmpfs of its own size on the host (under the state dir: down.sh unmounts it).
mkdir -p "$POOL"
mount -t tmpfs -o size="${MN_POOL_VM}m",mode=0700 fve2e-pool-vm "$POOL"
while read -r tar _; do
  ctr --address "$CONTAINERD_SOCK" -n k8s.io images import "$REPO_ROOT/_output/images/$tar" >/dev/null
done < "$REPO_ROOT/_output/images/images.txt"
"${K[@]}" label node "$NODE_NAME" topology.kubernetes.io/zone=zone-a --overwrite >/dev/null
for spec in "${NODES[@]}"; do
  # shellcheck disable=SC2086
  fg "$CLUSTER_DIR/node.sh" up $spec
done
# The second shared pool: a CephFS (ceph.sh), started beside what follows (about 15-40 s).
"$HERE/ceph.sh" up > "$OUT/ceph-up.log" 2>&1 &
CEPH_UP=$!
# The shared pool: one GlusterFS volume over TLS (gluster.sh); every node's own client mounts
# it once filevol has installed the certificates from the chart's Secret (step 3).
fg "$HERE/gluster.sh" up
# The directory pool: directory volumes (ReadWriteMany) enforce their size with btrfs
# qgroups, and GlusterFS has none. One btrfs (a sparse file, loop-mounted here: vm) mounted
# from the same device in n2's and n3's mount namespaces (their copies of the host's mounts
# were dropped at their creation): one filesystem at the same path on every node, standing
# in for a shared filesystem with per-directory quotas (README "Extra nodes"). clean.sh:
# down.sh unmounts it (under the state dir) and detaches the device (backed there); the
# nodes' mounts go with their namespaces.
truncate -s 2G "$DIR_POOL.img"
mkfs.btrfs -q -f "$DIR_POOL.img" >/dev/null
mkdir -p "$DIR_POOL"
mount -o loop "$DIR_POOL.img" "$DIR_POOL"
dev=$(findmnt -n -o SOURCE --target "$DIR_POOL")
for spec in "${NODES[@]}"; do fg "$CLUSTER_DIR/node.sh" mount "${spec%% *}" "$dev" "$DIR_POOL" btrfs; done
log "dir pool: btrfs on $dev ($DIR_POOL.img) at $DIR_POOL on vm, ${NODES[*]%% *}"
# The CephFS, mounted on every node by a ceph-fuse client of its own (vm's on the host, n2's
# and n3's in their namespaces), and by the stories' reader.
tc=$(date +%s)
wait "$CEPH_UP" || die "ceph.sh up failed: $(tail -n 15 "$OUT/ceph-up.log")"
CEPH_UP=
fg "$HERE/ceph.sh" mount-vm
for spec in "${NODES[@]}"; do fg "$CLUSTER_DIR/node.sh" ceph-client "${spec%% *}" "$CEPH_CONF" "$CEPH_MNT"; done
fg "$HERE/ceph.sh" mount-reader
note "ceph: $(grep -o 'cluster [0-9a-f-]* at [0-9.]*' "$OUT/ceph-up.log"), mounted on vm, ${NODES[*]%% *} and by the reader: ready $(( $(date +%s) - tc ))s after the directory pool"
if [ "${MN_STOP_AFTER:-}" = dir-pool ]; then
  log "MN_STOP_AFTER=dir-pool: the nodes, GlusterFS and the directory pool are up"
  sleep infinity & wait $!
fi
for spec in "${NODES[@]}"; do
  n=${spec%% *}
  for i in $(seq 60); do "${K[@]}" get node "$n" >/dev/null 2>&1 && break; sleep 1; done
  "${K[@]}" wait --for=condition=Ready "node/$n" --timeout=120s >/dev/null || die "node $n not Ready"
done
note "cluster-up (3 nodes Ready): $(( $(date +%s) - t ))s"

# ---- 3. filevol ----------------------------------------------------------------------------
t=$(date +%s)
CHART_SH=$REPO_ROOT/hack/tools/e2e/chart.sh
# The shared pool's TLS (values.yaml sharedPool.clientTLS): the Secret holds gluster.sh's
# certificate, key and CA; each node's filevol-shared installs them in $GL_TLS_DIR, where
# that node's GlusterFS client, waiting for them, reads them and mounts (MOUNTS, beside the
# install: until it has, filevol-shared refuses the pool, not GlusterFS, and kubelet
# restarts it: the nodes' mounts are private here, mountPropagation None).
"${K[@]}" create namespace filevol --dry-run=client -o yaml | "${K[@]}" apply -f - >/dev/null
"${K[@]}" -n filevol create secret generic fvmn-gluster-tls --from-file="$STATE_DIR/gluster/ssl/tls.crt" \
  --from-file="$STATE_DIR/gluster/ssl/tls.key" --from-file="$STATE_DIR/gluster/ssl/ca.crt" --dry-run=client -o yaml |
  "${K[@]}" apply -f - >/dev/null
{
  "$HERE/gluster.sh" mount-vm "$GL_TLS_DIR/glusterfs.ca"
  for spec in "${NODES[@]}"; do
    "$CLUSTER_DIR/node.sh" pool-client "${spec%% *}" "$GL_IP" "$GL_VOL" "$SHARED_POOL" "$GL_TLS_DIR/glusterfs.ca"
  done
} > "$OUT/mounts.log" 2>&1 &
MOUNTS=$!
# The CephFS release, installed at the same time (its pool is mounted already). Its
# controller evicts a force-detached node's client with ceph.sh's client.fence, given in
# the controller-publish Secret (values-ceph.yaml).
"$HERE/ceph.sh" fence-key | { read -r key; "${K[@]}" -n filevol create secret generic filevol-ceph-fence \
  --from-literal=adminID=fence --from-literal=adminKey="$key" --dry-run=client -o yaml; } | "${K[@]}" apply -f - >/dev/null
"$CHART_SH" helm upgrade --install filevol-ceph "$REPO_ROOT/charts/filevol" --namespace filevol \
  -f "$REPO_ROOT/hack/tools/e2e/values-e2e.yaml" -f "$HERE/values.yaml" -f "$HERE/values-ceph.yaml" \
  --wait --timeout 5m > "$OUT/install-ceph.log" 2>&1 &
CEPH_INSTALL=$!
fg "$CHART_SH" helm upgrade --install filevol "$REPO_ROOT/charts/filevol" --namespace filevol --create-namespace \
  -f "$REPO_ROOT/hack/tools/e2e/values-e2e.yaml" -f "$HERE/values.yaml" --set sharedPool.clientTLS.hostDir="$GL_TLS_DIR" \
  --wait --timeout 5m > "$OUT/install.log" 2>&1 ||
  die "helm install failed: $(tail -n 30 "$OUT/install.log"; tail -n 5 "$OUT/mounts.log")"
wait "$MOUNTS" || die "the shared pool's clients did not mount: $(tail -n 10 "$OUT/mounts.log")"
MOUNTS=
wait "$CEPH_INSTALL" || die "helm install of filevol-ceph failed: $(tail -n 30 "$OUT/install-ceph.log")"
CEPH_INSTALL=
if [ "${MN_STOP_AFTER:-}" = install ]; then
  log "MN_STOP_AFTER=install: filevol installed, the GlusterFS clients mounted over TLS"
  sleep infinity & wait $!
fi
for i in $(seq 120); do
  # Every node lists the three drivers: the node-local one and both shared ones.
  regs=$("${K[@]}" get csinode -o jsonpath='{range .items[*]}{.metadata.name}={.spec.drivers[*].name}{"\n"}{end}' |
    awk '/[= ]filevol\.csi\.io( |$)/ && /[= ]shared\.filevol\.csi\.io( |$)/ && /[= ]ceph\.filevol\.csi\.io( |$)/' | wc -l)
  [ "$regs" = 3 ] && break
  sleep 1
done
[ "$regs" = 3 ] || die "filevol, shared.filevol.csi.io and ceph.filevol.csi.io registered on $regs of 3 nodes: $("${K[@]}" get csinode -o wide)"
# One listing of the pods: name, node, containers and their restart counts (comma lists).
pods=$("${K[@]}" -n filevol get pods --no-headers -o custom-columns='P:.metadata.name,N:.spec.nodeName,C:.status.containerStatuses[*].name,R:.status.containerStatuses[*].restartCount')
note "install: $(( $(date +%s) - t ))s; $(awk '{r = $4; gsub(/[,0]/, "", r); printf "%s@%s%s ", $1, $2, (r == "" ? "" : " (restarted: " $4 ")")}' <<< "$pods")"
# A container that restarted during the install: what it said before, while it lasts (the
# stories replace pods, and their logs go with them).
while read -r pod c r; do
  [ "${r:-0}" -gt 0 ] || continue
  mkdir -p "$OUT/install-restarts"
  "${K[@]}" -n filevol logs "$pod" -c "$c" --previous > "$OUT/install-restarts/$pod-$c.log" 2>&1 || true
  note "  $pod: container $c restarted $r time(s) during the install: install-restarts/$pod-$c.log"
done < <(awk '{n = split($3, c, ","); split($4, r, ","); for (i = 1; i <= n; i++) print $1, c[i], r[i]}' <<< "$pods")

# ---- 4. stories ----------------------------------------------------------------------------
if [ "$MN_STORIES" = 1 ]; then
t=$(date +%s)
rc=0
fg env FILEVOL_E2E_KUBECONFIG="$ADMIN_KUBECONFIG" FILEVOL_E2E_IMAGE="$BUSYBOX_TAG" \
  FILEVOL_E2E_NODE_SH="$CLUSTER_DIR/node.sh" FILEVOL_E2E_KUBECTL="$KUBECTL" FILEVOL_E2E_KUBECTL_FILEVOL="$REPO_ROOT/bin/kubectl-filevol" \
  FILEVOL_E2E_POOL_MIB="vm=$MN_POOL_VM,n2=$MN_POOL_N2,n3=$MN_POOL_N3" FILEVOL_E2E_GLUSTER_BRICK="$STATE_DIR/gluster/brick" \
  FILEVOL_E2E_DIR_POOL="$DIR_POOL" FILEVOL_E2E_STATE="$STATE_DIR" FILEVOL_E2E_CEPH_READER="$CEPH_READER" \
  "$OUT/bin/multinode.test" -test.v -test.timeout 20m ${MN_RUN:+-test.run "$MN_RUN"} > "$OUT/stories.log" 2>&1 || rc=$?
lines=$(grep -E '^--- (PASS|FAIL|SKIP)' "$OUT/stories.log" || true)
pass=$(grep -c '^--- PASS' <<<"$lines" || true) fail=$(grep -c '^--- FAIL' <<<"$lines" || true)
PASSED=$(( PASSED + pass )) FAILED=$(( FAILED + fail ))
note "stories: $(( $(date +%s) - t ))s, $pass passed, $fail failed (exit $rc, $OUT/stories.log)"
grep -E '^--- SKIP' <<<"$lines" | sed 's/^/  /' || true
while IFS= read -r l; do note "  $l"; done < <(go_failures "$OUT/stories.log")
[ "$rc" = 0 ] || failed+=(stories)
fi

# ---- 5. External Storage suite: what needs several nodes --------------------------------------
# The single-node run (make e2e) runs the suite's other tests: here only what one node
# cannot show, from the same declarations (test/e2e/testdriver*.yaml) with what is
# different on three nodes set below. Their reasons go to the summary.
if [ "$MN_SUITE" != none ]; then
  t=$(date +%s)
  SUITE_DIR=$OUT/suite
  source "$CLUSTER_DIR/suite.sh"
  # set_cap FILE NAME VALUE WHY: the rendered declaration's capability NAME set to VALUE.
  set_cap() {
    [ "$(grep -cE "^\s+$2: " "$1")" = 1 ] || die "$1: capability $2 not declared exactly once"
    sed -i -E "s|^(\s+$2:).*|\1 $3   # multinode: $4|" "$1"
    note "  $(basename "$1"): $2: $3 ($4)"
  }
  "$OUT/bin/capprobe" -endpoint "unix://$KUBELET_ROOT/plugins/filevol.csi.io/csi.sock" \
    -template "$REPO_ROOT/test/e2e/testdriver.yaml" -out "$OUT/testdriver.yaml" >/dev/null
  set_cap "$OUT/testdriver.yaml" groupSnapshot false "values.yaml: snapshotter: node; a per-node csi-snapshotter serves no group snapshots"
  # (n2's pool is 512 MiB, for the capacity story: a 1 GiB claim that the topology tests
  # allow on n2 alone never fits, and the scheduler and the provisioners rightly refuse it.)
  set_cap "$OUT/testdriver.yaml" Min 300Mi "the smallest xfs; n2's pool (MN_POOL_N2, 512 MiB) cannot hold the 1Gi default"
  # The shared driver is probed at vm's node plugin and at one controller replica, whose
  # socket lies in its pod's emptyDir on the node it runs on (vm's kubelet root, or the
  # extra node's, $STATE_DIR/nodes/NAME/kubelet on the host), reached through a short
  # symlink (a unix socket address is at most 108 bytes).
  # (jsonpath prints no newline: read then fails although it read both.)
  read -r uid node < <("${K[@]}" -n filevol get pods -l app.kubernetes.io/component=shared-controller \
    -o jsonpath='{.items[0].metadata.uid} {.items[0].spec.nodeName}') || [ -n "${node:-}" ] || die "no shared controller pod"
  root=$KUBELET_ROOT; [ "$node" = "$NODE_NAME" ] || root=$STATE_DIR/nodes/$node/kubelet
  ln -sfn "$root/pods/$uid/volumes/kubernetes.io~empty-dir/socket-dir" "$STATE_DIR/shared-controller"
  "$OUT/bin/capprobe" -endpoint "unix://$KUBELET_ROOT/plugins/shared.filevol.csi.io/csi.sock,unix://$STATE_DIR/shared-controller/csi.sock" \
    -template "$REPO_ROOT/test/e2e/testdriver-shared.yaml" -out "$OUT/testdriver-shared.yaml" >/dev/null
  set_cap "$OUT/testdriver-shared.yaml" singleNodeVolume false "every node mounts the pool: a volume is attached to one node at a time, and moves"
  # Its directory volumes (the btrfs every node mounts, class filevol-dir): ReadWriteMany.
  "$OUT/bin/capprobe" -endpoint "unix://$KUBELET_ROOT/plugins/shared.filevol.csi.io/csi.sock,unix://$STATE_DIR/shared-controller/csi.sock" \
    -template "$REPO_ROOT/test/e2e/testdriver-dir.yaml" -out "$OUT/testdriver-dir.yaml" >/dev/null
  set_cap "$OUT/testdriver-dir.yaml" singleNodeVolume false "every node mounts the directory pool: pods on several nodes use one claim at once"
  note "suite: declarations rendered ($(( $(date +%s) - t ))s)"
  suite_ssh_env
  # The three passes run at once (suite_start): each waits on pods moving between nodes
  # far more than it computes.
  # Node-local: each node is its own topology segment (topology.filevol.csi.io/node), so
  # both topology tests run, the conflicting one only here (one node is one segment). Its
  # multiVolume "on different node" tests skip themselves (singleNodeVolume).
  suite_start local 4 'External.Storage.*\[Driver: filevol.csi.io\].*topology should' '' "$OUT/testdriver.yaml"
  # Shared: the multiVolume tests that move two volumes from one node to another. Its
  # image volumes are single-node (no RWX, no ROX: internal/csi/validate.go,
  # errImageSingleNode), so "concurrently ... from pods on different node" skips itself.
  suite_start shared 4 'External.Storage.*\[Driver: shared.filevol.csi.io\].*multiVolume.*on different node' '' "$OUT/testdriver-shared.yaml"
  # Directory volumes: one claim written from pods on different nodes at once (RWX), and
  # volumes that move between nodes.
  suite_start dir 4 'External.Storage.*\[Driver: shared.filevol.csi.io\].*multiVolume.*on different node' '' "$OUT/testdriver-dir.yaml"
  suite_wait local; suite_wait shared; suite_wait dir
  if [ "$MN_SUITE" = full ]; then
    [[ ${ssh_env[*]} ]] || die "MN_SUITE=full: no ssh key (up.sh did not start its sshd)"
    # One at a time: a test that stops a kubelet breaks any other under way on that node.
    if [ "${MN_DISRUPTIVE:-both}" != shared ]; then
      suite_pass disruptive 1 'External.Storage.*\[Driver: filevol.csi.io\].*\[Disruptive\]' '' "$OUT/testdriver.yaml"
    fi
    if [ "${MN_DISRUPTIVE:-both}" != local ]; then
      suite_pass disruptive-shared 1 'External.Storage.*\[Driver: shared.filevol.csi.io\].*\[Disruptive\]' '' \
        "$OUT/testdriver-shared.yaml"
    fi
  fi
fi
[ ${#failed[@]} = 0 ] || die "failed: ${failed[*]}"
