#!/usr/bin/env bash
# gluster.sh up|mount-vm: the multi-node cluster's shared pool, one GlusterFS volume.
#
#   up        glusterd and a one-brick volume in a network namespace of their own
#             (pinned at $GL/ns/net), on our node bridge (node.sh net-up) at $GL_IP
#             through the veth fve-gl; glusterd in its own PID and mount namespaces
#             (its /run, /var/lib/glusterd and /var/log/glusterfs are $GL's
#             directories), so it shares nothing with a glusterd of the host and its
#             brick dies with it.
#   mount-vm [FILE]  the FUSE client of node vm: vm is the host (its kubelet runs in the
#             host's namespaces), so its client runs in the host's network and mount
#             namespaces and reaches the server over the bridge's host address. With FILE,
#             it first waits for FILE (the TLS files filevol installs from the chart's
#             Secret), as a node's mount unit would.
#
# TLS on the I/O path (docs/shared-pools-glusterfs.md, "Certificates from a Secret"): up
# makes a CA and one peer certificate ($GL/ssl, also the Secret's files: tls.crt, tls.key,
# ca.crt), and the volume's ssl.own-cert, ssl.private-key and ssl.ca-list name
# $GL_TLS_DIR/glusterfs.{pem,key,ca}: on the nodes, the host directory the chart's
# sharedPool.clientTLS fills from the Secret; in the server's mount namespace, $GL/ssl
# bound there (a server host's own copy at the same path).
#
# The extra nodes mount the volume through `node.sh pool-client`: their clients run in
# their own namespaces and cgroups, so `node.sh kill` kills a node's client and cutting
# its veth cuts it off the server.
#
# Clean-up is down.sh's: every process is recorded ($STATE_DIR/pids), the veth is
# stamped (`own link`), the namespace pin and the vm mount are under the state dir.
#
# The volume's options are those filevol's fencing needs (docs/shared-pools.md, "Fencing"):
# client.strict-locks on, coherent metadata (stat-prefetch and quick-read off, clients
# with entry-timeout=0 and attribute-timeout=0), and a dead or cut-off client noticed in
# seconds (ping-timeout 5, server keepalive 2/1/3, tcp-user-timeout 5), so its locks are
# released and another node may attach its volumes.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../cluster/lib.sh"
[ "$(id -u)" = 0 ] || die "gluster.sh must run as root"
export PATH=$PATH:/usr/local/sbin:/usr/sbin:/sbin

GL=$STATE_DIR/gluster
GL_IP=${GL_IP:-10.89.1.250}
GL_VOL=fvmn
GL_LINK=${GL_LINK:-fve-gl}
GL_BRIDGE=${GL_BRIDGE:-fve2e-nodes}  # node.sh's bridge (the knob: a test of this script alone)
# Where every node (vm on the host, n2/n3 in their mount namespaces) mounts the volume:
# values.yaml's sharedPool.hostPath.
SHARED_POOL=$STATE_DIR/shared-pool
CLIENT_OPTS=(--entry-timeout=0 --attribute-timeout=0)
GL_TLS_DIR=${GL_TLS_DIR:-$STATE_DIR/shared-pool-tls}
GL_TLS_CN=fvmn-peer

# make_tls DIR: a CA and one peer certificate signed by it (EC P-256, two days), as
# glusterfs.{ca,pem,key} and as a kubernetes.io/tls Secret's tls.crt, tls.key, ca.crt.
make_tls() {
  local d=$1
  mkdir -p "$d" && chmod 700 "$d"
  openssl ecparam -name prime256v1 -genkey -noout -out "$d/ca.key" 2>/dev/null
  openssl req -x509 -new -key "$d/ca.key" -subj "/CN=fvmn-test-ca" -days 2 -out "$d/glusterfs.ca" 2>/dev/null
  openssl ecparam -name prime256v1 -genkey -noout -out "$d/glusterfs.key" 2>/dev/null
  openssl req -new -key "$d/glusterfs.key" -subj "/CN=$GL_TLS_CN" -out "$d/peer.csr" 2>/dev/null
  openssl x509 -req -in "$d/peer.csr" -CA "$d/glusterfs.ca" -CAkey "$d/ca.key" -CAcreateserial -CAserial "$d/ca.srl" \
    -days 2 -out "$d/glusterfs.pem" 2>/dev/null
  rm -f "$d/ca.key" "$d/peer.csr" "$d/ca.srl"
  ln -sf glusterfs.pem "$d/tls.crt"; ln -sf glusterfs.key "$d/tls.key"; ln -sf glusterfs.ca "$d/ca.crt"
  chmod 600 "$d"/glusterfs.*
}

cli() { # gluster CLI in the server's namespaces (its /run holds glusterd's socket)
  # The recorded process is the PID namespace's init, in glusterd's mount namespace.
  local init; init=$(awk '$1 == "gluster-server" {print $2}' "$PIDS_FILE" | tail -1)
  nsenter -t "$init" -m -n -p -- gluster --mode=script "$@"
}

up() {
  command -v glusterd >/dev/null || die "glusterd missing (hack/install-deps.sh)"
  ip link show "$GL_BRIDGE" >/dev/null 2>&1 || die "no node bridge: node.sh net-up first"
  command -v openssl >/dev/null || die "openssl missing (test/e2e/cluster/install-packages.sh)"
  rm -rf "$GL"
  mkdir -p "$GL"/{ns,run,lib,log,brick} /var/lib/glusterd /var/log/glusterfs "$SHARED_POOL" "$GL_TLS_DIR"
  make_tls "$GL/ssl"
  server_netns "$GL/ns" "$GL_LINK" fvp-gl "$GL_IP/24" "$GL_BRIDGE"
  cat > "$GL/glusterd.vol" <<'EOF'
volume management
    type mgmt/glusterd
    option working-directory /var/lib/glusterd
    option transport-type socket
    option transport.socket.listen-port 24007
    option transport.address-family inet
    option transport.socket.read-fail-log off
    option ping-timeout 0
    option event-threads 1
end-volume
EOF
  printf '#!/bin/sh\ncase " $* " in *" --version "*) echo "gsyncd.py (filevol e2e stand-in)";; esac\nexit 0\n' > "$GL/no-gsyncd"
  chmod 755 "$GL/no-gsyncd"
  # The new mount namespace is a copy of the host's: drop every mount glusterd does not
  # need (other tests' loop-device filesystems, the cluster's), or it holds them busy.
  setsid nsenter --net="$GL/ns/net" -- unshare --mount --propagation private --pid --fork --kill-child --mount-proc \
    -- sh -c '
awk "{print \$5}" /proc/self/mountinfo | sort -r | while read -r m; do
  case "$m" in
    /|/proc|/proc/*|/sys|/sys/*|/dev|/dev/*) ;;
    *) case "$0/" in "$m"/*) ;; *) umount -l "$m" 2>/dev/null || true ;; esac ;;
  esac
done
mount --bind "$0/run" /run
mount --bind "$0/lib" /var/lib/glusterd
mount --bind "$0/log" /var/log/glusterfs
mount --bind "$0/ssl" "$1"
libexec=$(glusterfs --print-libexecdir)
if [ -e "$libexec/gsyncd" ]; then mount --bind "$0/no-gsyncd" "$libexec/gsyncd"; fi
trap "exit 0" TERM
glusterd -N -f "$0/glusterd.vol" -l /var/log/glusterfs/glusterd.log -p /run/glusterd.pid &
wait $!' "$GL" "$GL_TLS_DIR" > "$GL/log/server.out" 2>&1 < /dev/null 8>&- &
  # Recorded: the PID namespace's init (the shell), not unshare, which ignores SIGTERM
  # while it waits. The init's trap ends it on SIGTERM (down.sh's first signal; without a
  # handler a namespace's init ignores it), and the namespace's every process with it.
  local u=$! i init=
  # unshare too, at once: if this script dies before the init is recorded, down.sh still
  # ends the namespace (unshare ignores SIGTERM; its SIGKILL kills its child, the init).
  record_pid gluster-unshare "$u"
  for ((i = 0; i < 100; i++)); do init=$(pgrep -P "$u" | head -1 || true); [ -n "$init" ] && break; sleep 0.05; done
  [ -n "$init" ] || die "glusterd's namespace did not start: $(tail -5 "$GL/log/server.out")"
  record_pid gluster-server "$init"
  for ((i = 0; i < 240; i++)); do
    [ -S "$GL/run/glusterd.socket" ] && cli volume list >/dev/null 2>&1 && break
    sleep 0.25
  done
  cli volume list >/dev/null 2>&1 || die "glusterd did not answer: $(tail -5 "$GL/log/server.out")"
  cli volume create "$GL_VOL" "$GL_IP:$GL/brick" force >/dev/null
  local kv
  for kv in client.strict-locks=on performance.stat-prefetch=off performance.quick-read=off \
    network.ping-timeout=5 server.keepalive-time=2 server.keepalive-interval=1 server.keepalive-count=3 \
    server.tcp-user-timeout=5 \
    ssl.own-cert="$GL_TLS_DIR/glusterfs.pem" ssl.private-key="$GL_TLS_DIR/glusterfs.key" ssl.ca-list="$GL_TLS_DIR/glusterfs.ca" \
    ssl.certificate-depth=1 auth.ssl-allow="$GL_TLS_CN" client.ssl=on server.ssl=on; do
    cli volume set "$GL_VOL" "${kv%%=*}" "${kv#*=}" >/dev/null
  done
  cli volume start "$GL_VOL" >/dev/null
  for ((i = 0; i < 240; i++)); do
    cli volume status "$GL_VOL" --xml 2>/dev/null | sed -n '/<node>/,$p' | grep -q '<status>1</status>' && break
    sleep 0.25
  done
  log "gluster: volume $GL_VOL served at $GL_IP over TLS (brick $GL/brick; the Secret's files in $GL/ssl)"
}

mount_vm() {
  mountpoint -q "$SHARED_POOL" && die "$SHARED_POOL is already a mount point"
  local wait_file=${1:-} i
  if [ -n "$wait_file" ]; then
    for ((i = 0; i < 1200; i++)); do [ -s "$wait_file" ] && break; sleep 0.25; done
    [ -s "$wait_file" ] || die "vm: $wait_file did not appear in 300 s (filevol's shared node plugin installs it from the Secret)"
  fi
  setsid glusterfs -N --process-name fuse --volfile-server="$GL_IP" --volfile-id="$GL_VOL" \
    "${CLIENT_OPTS[@]}" --log-file="$LOG_DIR/cluster/gluster-client-vm.log" "$SHARED_POOL" \
    > /dev/null 2>&1 < /dev/null 8>&- &
  record_pid gluster-client-vm $!
  for ((i = 0; i < 240; i++)); do
    [ "$(stat -f -c %T "$SHARED_POOL" 2>/dev/null)" = fuseblk ] && break
    findmnt -n -t fuse.glusterfs "$SHARED_POOL" >/dev/null && break
    sleep 0.25
  done
  findmnt -n -t fuse.glusterfs "$SHARED_POOL" >/dev/null || die "vm: $SHARED_POOL not mounted"
  log "gluster: vm mounted $GL_VOL at $SHARED_POOL"
}

case ${1:-} in
  up) up ;;
  mount-vm) mount_vm "${2:-}" ;;
  cli) shift; cli "$@" ;;
  *) sed -n '2,35p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
