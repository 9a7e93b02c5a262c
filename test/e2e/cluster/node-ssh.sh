#!/usr/bin/env bash
# node-ssh.sh ENV_FILE: the ForceCommand of the e2e node's sshd (up.sh). Runs the command
# the client sent with the cluster's environment, which up.sh wrote to ENV_FILE: its state
# and cache paths, and a PATH that starts with node-bin/ (systemctl and sudo for the
# upstream [Disruptive] tests, which expect a systemd node).
set -eu
# shellcheck source=/dev/null
source "$1"
if [ -n "${SSH_ORIGINAL_COMMAND:-}" ]; then exec bash -c "$SSH_ORIGINAL_COMMAND"; fi
exec bash -l
