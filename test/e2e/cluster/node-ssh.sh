#!/usr/bin/env bash
# node-ssh.sh ENV_FILE: the ForceCommand of an e2e node's sshd (up.sh for vm, node.sh for
# n2, n3). Runs the command the client sent with the cluster's environment, which up.sh
# (node.sh) wrote to ENV_FILE: its state and cache paths, and a PATH that starts with
# node-bin/ (systemctl and sudo for the upstream [Disruptive] tests, which expect a
# systemd node).
set -eu
# shellcheck source=/dev/null
source "$1"
cmd=${SSH_ORIGINAL_COMMAND:-exec bash -l}
if [ -n "${FILEVOL_E2E_NODE:-}" ]; then
  # An extra node (node.sh): its sshd is in the node's network namespace only; the command
  # runs in its mount and UTS namespaces too, so `mount` and /proc/self/mountinfo show the
  # node's mounts. fd 9 keeps the host's mount namespace, where node-bin/systemctl drives
  # the node's kubelet through node.sh (whose namespace pins are host mounts).
  nd=$FILEVOL_E2E_STATE/nodes/$FILEVOL_E2E_NODE
  exec 9< /proc/self/ns/mnt
  exec nsenter --mount="$nd/ns/mnt" --uts="$nd/ns/uts" -- bash -c "$cmd"
fi
exec bash -c "$cmd"
