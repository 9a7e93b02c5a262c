#!/usr/bin/env bash
# supervise.sh COMMAND...: run COMMAND, and run it again a second after it exits, as the
# kubelet restarts a sidecar container. The CSI sidecars exit on purpose when they lose
# the driver's socket ("Lost connection to CSI driver, exiting"), e.g. while filevol
# restarts; in a pod the kubelet brings them back, on the host this does.
# SIGTERM/SIGINT stop COMMAND, wait for it, and exit. COMMAND gets SIGTERM if this script
# dies in any other way (setpriv --pdeathsig), so a SIGKILL here leaves nothing behind.
set -u
child=
stop() {
  if [ -n "$child" ]; then kill -TERM "$child" 2>/dev/null; wait "$child" 2>/dev/null; fi
  exit 0
}
trap stop TERM INT
while :; do
  echo "==== $(date -u +%FT%T.%3NZ) supervise.sh: starting $*"
  setpriv --pdeathsig TERM -- "$@" &
  child=$!
  wait "$child"
  rc=$?
  child=
  echo "==== $(date -u +%FT%T.%3NZ) supervise.sh: $1 exited ($rc); again in 1s"
  sleep 1
done
