#!/usr/bin/env bash
# Bring up the single-node e2e cluster from the binaries build.sh cached. Everything
# listens on 127.0.0.1; pods sit on a host-only bridge (no gateway, no masquerade).
#
# It refuses to run on a machine that is a Kubernetes node (a kubelet it did not start).
# Then it runs down.sh (non-graceful) to clean up whatever a killed earlier run left
# behind, and starts: containerd, etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubelet (root dir /var/lib/kubelet, bind-mounted from the state dir),
# an sshd on the node's address for the upstream [Disruptive] tests; waits for node
# Ready, imports the local images, applies the VolumeSnapshot CRDs and starts
# snapshot-controller. Every PID is recorded in $STATE_DIR/pids, and everything else it
# creates in $STATE_DIR/owned, before creating it: down.sh removes exactly that.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[ "$(id -u)" = 0 ] || die "up.sh must run as root"

# ---- never on a Kubernetes node ---------------------------------------------------------
# A kubelet we did not start means a real node: our cluster would bind-mount over its
# /var/lib/kubelet and share its iptables chains. Refuse before touching anything.
theirs=$(foreign_kube | grep '^kubelet ' || true)
[ -z "$theirs" ] || die "a kubelet this harness did not start is running: this machine is a Kubernetes node, and the e2e cluster would disturb it. Not starting; nothing was touched.
$(describe_pids <<<"$theirs")"

T0=$(date +%s.%N)
ts() { printf '%s [%6.1fs] %s\n' "$(date +%H:%M:%S)" "$(echo "$(date +%s.%N) - $T0" | bc)" "$*"; }

# ---- clean up leftovers of an earlier (possibly killed) run ----------------------------
FILEVOL_E2E_GRACEFUL=0 "$CLUSTER_DIR/down.sh" | sed 's/^/  /'
# What is still mounted under the kubelet root after down.sh is not ours (a real node's
# pods, with its kubelet stopped): our bind mount would hide it.
theirs=$(mounts_under "$KUBELET_ROOT")
[ -z "$theirs" ] || die "$KUBELET_ROOT holds mounts this harness did not make (is this a Kubernetes node?); not starting:
$(sed 's/^/    /' <<<"$theirs")"
if [[ $(ip -o addr show) == *" $NODE_IP/"* ]]; then
  die "the node address $NODE_IP is already on this machine, and not ours: $(ip -o addr show | grep -F " $NODE_IP/")"
fi
for port in 2379 2380 2381 6443 10248 10250 10257 10259; do
  if [ -n "$(ss -ltnH "sport = :$port")" ]; then
    die "port $port is in use by a process this script did not start: $(ss -ltnpH "sport = :$port")"
  fi
done

for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl snapshot-controller; do
  [ -x "$BIN_DIR/$b" ] || die "$BIN_DIR/$b missing: run build.sh (make e2e-tools) first"
done
for t in pause busybox agnhost glibc-dns-testing; do [ -s "$IMG_DIR/$t.tar" ] || die "$IMG_DIR/$t.tar missing: run build.sh"; done
for c in containerd runc ctr openssl curl sshd ssh-keygen; do command -v "$c" >/dev/null || die "$c missing: run install-packages.sh"; done
[ -x /usr/lib/cni/bridge ] || die "CNI plugins missing: run install-packages.sh"
getent hosts "$NODE_NAME" | grep -q '^127\.' || die "$NODE_NAME must resolve to 127.0.0.1 (/etc/hosts)"

# On failure, tear down what was started (logs stay) unless asked to keep it for debugging.
on_exit() {
  local rc=$?
  if [ "$rc" != 0 ] && [ "${FILEVOL_E2E_KEEP_ON_FAILURE:-0}" != 1 ]; then
    log "up.sh failed (exit $rc): tearing down; logs are in $LOG_DIR/cluster" >&2
    FILEVOL_E2E_GRACEFUL=0 "$CLUSTER_DIR/down.sh" >&2 || true
  fi
}
trap on_exit EXIT

# own_dir DIR...: create DIR, stamped as ours when it was absent (hard-coded paths the
# kubelet, containerd, libcni or sshd would otherwise create unrecorded).
own_dir() {
  local d
  for d in "$@"; do
    [ -e "$d" ] || { own dir "$d"; mkdir -p "$d"; }
  done
}

# Keep one generation of old logs.
if [ -d "$LOG_DIR/cluster" ]; then rm -rf "$LOG_DIR/cluster.prev"; mv "$LOG_DIR/cluster" "$LOG_DIR/cluster.prev"; fi
LOGS=$LOG_DIR/cluster
mkdir -p "$LOGS" "$STATE_DIR"/{etcd,kubelet,pod-logs,cni/net.d,cni/ipam,containerd,ssh}
rm -f "$OWNED"    # down.sh removed what the last one named
own_dir /var/log/containers /var/lib/cni /var/lib/cni/results /run/containerd /run/containerd/s

PIDS=$PIDS_FILE
: > "$PIDS"
start() { # name command... ; its own session, so a ^C in make does not half-kill the cluster
  local n=$1; shift
  setsid "$@" > "$LOGS/$n.log" 2>&1 < /dev/null 8>&- &   # 8: run.sh's lock
  local p=$!
  record_pid "$n" "$p"
  ts "started $n (pid $p)"
}
waitfor() { # what timeout-seconds command...
  local what=$1 t=$2 i; shift 2
  for ((i = 0; i < t * 4; i++)); do
    if "$@" >/dev/null 2>&1; then ts "$what ready"; return 0; fi
    # fail fast when the process we wait for has died
    while read -r n p _; do
      kill -0 "$p" 2>/dev/null || die "$n (pid $p) exited; see $LOGS/$n.log:
$(tail -n 15 "$LOGS/$n.log")"
    done < "$PIDS"
    sleep 0.25
  done
  die "timed out after ${t}s waiting for $what (logs in $LOGS)"
}

# ---- PKI and kubeconfigs (kept across runs) ---------------------------------------------
P=$STATE_DIR/pki
if [ ! -s "$P/.complete" ]; then
  rm -rf "$P"; mkdir -p "$P"
  (
    cd "$P"
    umask 077
    openssl genrsa -out ca.key 2048 2>/dev/null
    openssl req -x509 -new -nodes -key ca.key -subj "/CN=filevol-e2e-ca" -days 3650 -out ca.crt 2>/dev/null
    ext() { printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=%s\n%s\n' "$1" "${2:+subjectAltName=$2}"; }
    cert() { # name subject extendedKeyUsage [SANs]
      openssl genrsa -out "$1.key" 2048 2>/dev/null
      openssl req -new -key "$1.key" -subj "$2" -out "$1.csr" 2>/dev/null
      openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
        -extfile <(ext "$3" "${4:-}") -out "$1.crt" 2>/dev/null
      rm -f "$1.csr"
    }
    cert apiserver "/CN=kube-apiserver" serverAuth \
      "IP:127.0.0.1,IP:${SERVICE_CIDR%.*}.1,DNS:localhost,DNS:$NODE_NAME,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
    cert kubelet "/CN=$NODE_NAME" serverAuth "IP:127.0.0.1,DNS:localhost,DNS:$NODE_NAME"
    cert admin "/CN=admin/O=system:masters" clientAuth
    cert controller-manager "/CN=system:kube-controller-manager" clientAuth
    cert scheduler "/CN=system:kube-scheduler" clientAuth
    cert kubelet-client "/CN=system:node:$NODE_NAME/O=system:nodes" clientAuth
    cert apiserver-kubelet-client "/CN=kube-apiserver-kubelet-client/O=system:masters" clientAuth
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  )
  for kc in admin:admin controller-manager:system:kube-controller-manager scheduler:system:kube-scheduler \
            kubelet:system:node:$NODE_NAME; do
    name=${kc%%:*} user=${kc#*:} f=$STATE_DIR/${kc%%:*}.kubeconfig
    cb=$name; [ "$name" = kubelet ] && cb=kubelet-client
    rm -f "$f"
    "$KUBECTL" config set-cluster local --server=https://127.0.0.1:6443 --certificate-authority="$P/ca.crt" --embed-certs=true --kubeconfig="$f" >/dev/null
    "$KUBECTL" config set-credentials "$user" --client-certificate="$P/$cb.crt" --client-key="$P/$cb.key" --embed-certs=true --kubeconfig="$f" >/dev/null
    "$KUBECTL" config set-context default --cluster=local --user="$user" --kubeconfig="$f" >/dev/null
    "$KUBECTL" config use-context default --kubeconfig="$f" >/dev/null
  done
  date -u +%FT%TZ > "$P/.complete"
  ts "generated PKI and kubeconfigs"
fi

# FILEVOL_E2E_MULTINODE=1 (multinode.sh): extra nodes (node.sh) come up beside this one, in
# network namespaces of their own. Their host names resolve nowhere, so the apiserver
# reaches every kubelet at its InternalIP, and this kubelet listens on its node address
# (on lo) with a serving certificate that names it.
KUBELET_ADDRESS=127.0.0.1 KUBELET_ADDRESS_TYPES=Hostname KUBELET_CERT=$P/kubelet
if [ "${FILEVOL_E2E_MULTINODE:-0}" = 1 ]; then
  KUBELET_ADDRESS=$NODE_IP KUBELET_ADDRESS_TYPES=InternalIP KUBELET_CERT=$P/kubelet-multinode
  if [ ! -s "$KUBELET_CERT.crt" ]; then
    (
      cd "$P"; umask 077
      openssl genrsa -out kubelet-multinode.key 2048 2>/dev/null
      openssl req -new -key kubelet-multinode.key -subj "/CN=$NODE_NAME" -out kubelet-multinode.csr 2>/dev/null
      openssl x509 -req -in kubelet-multinode.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
        -extfile <(printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:%s,IP:127.0.0.1,DNS:localhost,DNS:%s\n' "$NODE_IP" "$NODE_NAME") \
        -out kubelet-multinode.crt 2>/dev/null
      rm -f kubelet-multinode.csr
    )
  fi
fi

# ---- containerd -----------------------------------------------------------------------
C=$STATE_DIR/containerd
containerd_config "$C" "$CONTAINERD_SOCK" "$STATE_DIR/cni/net.d" > "$C/config.toml"
# Bridge without gateway or masquerade: pod traffic cannot leave the host bridge, and
# ip_forward is left alone.
cat > "$STATE_DIR/cni/net.d/10-filevol-e2e.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "filevol-e2e",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": false,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$POD_SUBNET"}]],
        "dataDir": "$STATE_DIR/cni/ipam"
      }
    },
    {"type": "loopback"}
  ]
}
EOF
ip link show "$BRIDGE" >/dev/null 2>&1 || own link "$BRIDGE"   # the bridge plugin creates it
start containerd containerd --config "$C/config.toml"

# ---- control plane --------------------------------------------------------------------
start etcd "$BIN_DIR/etcd" --name filevol-e2e --data-dir "$STATE_DIR/etcd/data" \
  --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
  --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
  --initial-cluster filevol-e2e=http://127.0.0.1:2380 --listen-metrics-urls http://127.0.0.1:2381 \
  --unsafe-no-fsync
waitfor etcd 60 curl -sf http://127.0.0.1:2379/health

# --endpoint-reconciler-type=none: 127.0.0.1 is not a valid Endpoints IP.
# --kubelet-preferred-address-types=Hostname: reach the kubelet as vm:10250 (= 127.0.0.1).
start kube-apiserver "$BIN_DIR/kube-apiserver" \
  --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port=6443 \
  --endpoint-reconciler-type=none \
  --etcd-servers=http://127.0.0.1:2379 \
  --tls-cert-file="$P/apiserver.crt" --tls-private-key-file="$P/apiserver.key" \
  --client-ca-file="$P/ca.crt" \
  --kubelet-client-certificate="$P/apiserver-kubelet-client.crt" --kubelet-client-key="$P/apiserver-kubelet-client.key" \
  --kubelet-certificate-authority="$P/ca.crt" \
  --kubelet-preferred-address-types="$KUBELET_ADDRESS_TYPES" \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="$P/sa.pub" --service-account-signing-key-file="$P/sa.key" \
  --service-cluster-ip-range="$SERVICE_CIDR" \
  --authorization-mode=Node,RBAC \
  --allow-privileged=true \
  --enable-admission-plugins=NodeRestriction \
  --v=2
export KUBECONFIG=$ADMIN_KUBECONFIG
waitfor kube-apiserver 120 "$KUBECTL" get --raw /readyz

start kube-controller-manager "$BIN_DIR/kube-controller-manager" \
  --bind-address=127.0.0.1 --secure-port=10257 \
  --kubeconfig="$STATE_DIR/controller-manager.kubeconfig" \
  --authentication-kubeconfig="$STATE_DIR/controller-manager.kubeconfig" \
  --authorization-kubeconfig="$STATE_DIR/controller-manager.kubeconfig" \
  --client-ca-file="$P/ca.crt" \
  --cluster-signing-cert-file="$P/ca.crt" --cluster-signing-key-file="$P/ca.key" \
  --root-ca-file="$P/ca.crt" --service-account-private-key-file="$P/sa.key" \
  --use-service-account-credentials=true \
  --controllers='*' \
  --service-cluster-ip-range="$SERVICE_CIDR" \
  --leader-elect=false \
  --v=2
start kube-scheduler "$BIN_DIR/kube-scheduler" \
  --bind-address=127.0.0.1 --secure-port=10259 \
  --kubeconfig="$STATE_DIR/scheduler.kubeconfig" \
  --authentication-kubeconfig="$STATE_DIR/scheduler.kubeconfig" \
  --authorization-kubeconfig="$STATE_DIR/scheduler.kubeconfig" \
  --leader-elect=false \
  --v=2

# ---- images ---------------------------------------------------------------------------
waitfor containerd 60 ctr --address "$CONTAINERD_SOCK" version
for t in pause busybox agnhost glibc-dns-testing; do
  ctr --address "$CONTAINERD_SOCK" -n k8s.io images import "$IMG_DIR/$t.tar" >/dev/null
done
ts "imported images: $(ctr --address "$CONTAINERD_SOCK" -n k8s.io images ls -q | grep -vc '^sha256:') tags"

# ---- kubelet --------------------------------------------------------------------------
# The e2e storage suite hard-codes /var/lib/kubelet: bind-mount the state dir's kubelet
# dir there so all data stays under the state dir.
own_dir "$KUBELET_ROOT"
own mount "$KUBELET_ROOT" "$(dev_ino "$STATE_DIR/kubelet")"
mount --bind "$STATE_DIR/kubelet" "$KUBELET_ROOT"
# Shared, as on a systemd host: a CSI node pod mounts kubelet's plugins/ and pods/ with
# Bidirectional propagation, which the runtime refuses on a private mount, and its
# staging and publish mounts must propagate back to the host.
mount --make-rshared "$KUBELET_ROOT"
# Our kubelet's cgroupRoot, in every hierarchy (cgroup v1 has one per controller; the
# kubelet wants it in each). cpuset: a new v1 cgroup starts with no CPUs and memory nodes.
while read -r h; do
  own cgroup "$h/$CGROUP_NAME"
  mkdir -p "$h/$CGROUP_NAME"
  for f in cpuset.cpus cpuset.mems; do
    if [ -e "$h/$CGROUP_NAME/$f" ] && [ -z "$(cat "$h/$CGROUP_NAME/$f")" ]; then cat "$h/$f" > "$h/$CGROUP_NAME/$f"; fi
  done
done < <(awk -v fs="$CGROUP_FS" '($9 == "cgroup" || $9 == "cgroup2") && ($5 == fs || index($5, fs "/") == 1) {print $5}' /proc/self/mountinfo | sort -u)
# The chains the kubelet makes and never removes: ours to remove if absent now.
for ipt in iptables ip6tables; do
  command -v $ipt >/dev/null || continue
  for table in filter nat mangle; do
    for chain in KUBE-FIREWALL KUBE-KUBELET-CANARY KUBE-IPTABLES-HINT; do
      $ipt -w -t $table -nL $chain >/dev/null 2>&1 || own chain $ipt $table $chain
    done
  done
done
# The node's address (lib.sh: NODE_IP), where the sshd below listens.
own addr "$NODE_IP/32" lo
ip addr add "$NODE_IP/32" dev lo
cat > "$STATE_DIR/kubelet-config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $KUBELET_ADDRESS
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: $P/ca.crt
authorization:
  mode: Webhook
tlsCertFile: $KUBELET_CERT.crt
tlsPrivateKeyFile: $KUBELET_CERT.key
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
imageServiceEndpoint: unix://$CONTAINERD_SOCK
cgroupDriver: cgroupfs
cgroupRoot: /$CGROUP_NAME
# cgroup v1 here; kubelet 1.36 refuses it unless told otherwise.
failCgroupV1: false
failSwapOn: false
clusterDomain: cluster.local
clusterDNS:
- ${SERVICE_CIDR%.*}.10
resolvConf: /etc/resolv.conf
podLogsDir: $STATE_DIR/pod-logs
serializeImagePulls: false
# The images cannot be pulled again: never garbage-collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%"
  imagefs.available: "1%"
  nodefs.inodesFree: "1%"
protectKernelDefaults: false
EOF
: > "$LOGS/kubelet.log"
"$CLUSTER_DIR/kubelet.sh" start >/dev/null   # the same start as over ssh (systemctl start kubelet)
ts "started kubelet (pid $(awk '$1 == "kubelet" {print $2}' "$PIDS"))"

# ---- sshd on the node's address ---------------------------------------------------------
# The upstream [Disruptive] storage tests ssh to the node's InternalIP as root with the key
# they are given (run.sh: KUBE_SSH_KEY_PATH), to stop and start the kubelet and look at
# its mounts. A fresh key pair each run; password and keyboard logins are off; the
# ForceCommand runs their command with node-bin/ first on the PATH.
S=$STATE_DIR/ssh
chmod 700 "$S"
rm -f "$S"/host_key* "$S"/id_ed25519*
ssh-keygen -q -t ed25519 -N '' -C filevol-e2e-node -f "$S/host_key"
ssh-keygen -q -t ed25519 -N '' -C filevol-e2e-suite -f "$S/id_ed25519"
cp "$S/id_ed25519.pub" "$S/authorized_keys"
{
  printf 'export PATH=%q\n' "$CLUSTER_DIR/node-bin:$PATH"
  for v in FILEVOL_E2E_STATE=$STATE_DIR FILEVOL_E2E_CACHE=$CACHE_ROOT FILEVOL_E2E_LOGS=$LOG_DIR \
           FILEVOL_E2E_KUBELET_ROOT=$KUBELET_ROOT FILEVOL_E2E_KEY=$KEY; do
    printf 'export %s=%q\n' "${v%%=*}" "${v#*=}"
  done
} > "$S/env"
cat > "$S/sshd_config" <<EOF
ListenAddress $NODE_IP:22
HostKey $S/host_key
PidFile none
AuthorizedKeysFile $S/authorized_keys
AllowUsers root
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
AllowTcpForwarding no
AllowAgentForwarding no
X11Forwarding no
PermitTunnel no
ForceCommand $CLUSTER_DIR/node-ssh.sh $S/env
EOF
own_dir /run/sshd     # sshd's privilege separation directory
start sshd "$(command -v sshd)" -D -e -f "$S/sshd_config"
waitfor sshd 30 ss -ltnH "src $NODE_IP:22"
waitfor node-registered 120 "$KUBECTL" get node "$NODE_NAME"
waitfor node-Ready 120 "$KUBECTL" wait --for=condition=Ready "node/$NODE_NAME" --timeout=1s
T_READY=$(printf '%.1f' "$(echo "$(date +%s.%N) - $T0" | bc)")

# ---- snapshot CRDs and controller -----------------------------------------------------
"$KUBECTL" apply --server-side -f "$KEY_DIR/crd/" >/dev/null
waitfor snapshot-CRDs 60 "$KUBECTL" wait --for=condition=Established --timeout=1s \
  crd/volumesnapshots.snapshot.storage.k8s.io crd/volumesnapshotcontents.snapshot.storage.k8s.io \
  crd/volumesnapshotclasses.snapshot.storage.k8s.io \
  crd/volumegroupsnapshots.groupsnapshot.storage.k8s.io \
  crd/volumegroupsnapshotcontents.groupsnapshot.storage.k8s.io \
  crd/volumegroupsnapshotclasses.groupsnapshot.storage.k8s.io
# (snapshot-controller and csi-snapshotter look for the group snapshot CRDs once, at
# start, and turn group snapshots off for good if they are not served yet.)
# The SnapshotMetadataService CRD (changed-block tracking): with it, the chart's
# snapshotMetadata.enabled=auto runs csi-snapshot-metadata beside the controllers.
"$KUBECTL" apply --server-side -f "$("$CLUSTER_DIR/snapshot-metadata.sh" --print-dir)/crd/" >/dev/null
waitfor cbt-CRD 60 "$KUBECTL" wait --for=condition=Established --timeout=1s \
  crd/snapshotmetadataservices.cbt.storage.k8s.io
# --enable-distributed-snapshotting: label each VolumeSnapshotContent with the node of its
# volume, which a csi-snapshotter in --node-deployment mode (the chart's default) waits for.
start snapshot-controller "$BIN_DIR/snapshot-controller" --kubeconfig="$ADMIN_KUBECONFIG" --leader-election=false \
  --enable-distributed-snapshotting --v=2
waitfor default-serviceaccount 60 "$KUBECTL" -n default get serviceaccount default

ts "cluster up (node Ready at ${T_READY}s); KUBECONFIG=$ADMIN_KUBECONFIG, logs in $LOGS"
