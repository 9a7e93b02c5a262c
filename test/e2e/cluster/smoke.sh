#!/usr/bin/env bash
# Smoke check of a running e2e cluster: a busybox pod (local image, never pulled) with an
# emptyDir runs to completion, and its log is readable through apiserver -> kubelet.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
export KUBECONFIG=$ADMIN_KUBECONFIG
K=$KUBECTL
t0=$(date +%s.%N)
name=cluster-smoke
$K delete pod "$name" --ignore-not-found --wait=true >/dev/null
$K apply -f - >/dev/null <<EOF2
apiVersion: v1
kind: Pod
metadata:
  name: $name
  namespace: default
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
  - name: bb
    image: $BUSYBOX_TAG
    imagePullPolicy: Never
    command: ["sh", "-c", "echo smoke-ok > /data/x && cat /data/x && ip -o -4 addr show eth0 | awk '{print \$4}' && ip route | grep -c default || true"]
    volumeMounts:
    - {name: data, mountPath: /data}
  volumes:
  - name: data
    emptyDir: {}
EOF2
if ! $K wait --for=jsonpath='{.status.phase}'=Succeeded "pod/$name" --timeout=120s >/dev/null; then
  $K describe pod "$name" >&2 || true
  die "smoke pod did not succeed"
fi
out=$($K logs "$name")
grep -qx smoke-ok <<<"$out" || die "unexpected smoke pod output: $out"
ip=$(sed -n 2p <<<"$out")
# pod traffic must stay on the host bridge: no default route in the pod
[ "$(sed -n 3p <<<"$out")" = 0 ] || die "smoke pod has a default route: $out"
$K delete pod "$name" --wait=true >/dev/null
log "smoke: busybox pod ran to completion in $(echo "$(date +%s.%N) - $t0" | bc | cut -c1-4)s (pod IP $ip on $BRIDGE)"
