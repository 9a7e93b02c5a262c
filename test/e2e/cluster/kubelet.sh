#!/usr/bin/env bash
# kubelet.sh start|stop|restart|is-active: the e2e node's kubelet, as systemd drives the
# kubelet of a real node. up.sh starts it with this; the upstream [Disruptive] storage
# tests stop and start it over ssh (`systemctl stop kubelet`: up.sh's sshd runs their
# commands with node-bin/ first on the PATH, whose systemctl calls this script).
#
# The kubelet's record in $STATE_DIR/pids is replaced in place, so down.sh still stops it
# at its place in the order (after the driver and sidecars recorded later).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[ "$(id -u)" = 0 ] || die "kubelet.sh must run as root"
# An ssh session's PATH may lack the sbin directories (mount, iptables, losetup...).
export PATH=$PATH:/usr/local/sbin:/usr/sbin:/sbin
LOG=$LOG_DIR/cluster/kubelet.log

# running: the pid of our kubelet, if it runs (a zombie waiting for PID 1 counts as gone).
running() {
  local n p st s
  [ -s "$PIDS_FILE" ] || return 1
  while read -r n p st; do
    [ "$n" = kubelet ] && [ "$(proc_start "$p" 2>/dev/null)" = "$st" ] || continue
    s=$(cat "/proc/$p/stat" 2>/dev/null) || continue; s=${s##*) }
    [ "${s:0:1}" != Z ] && { echo "$p"; return 0; }
  done < "$PIDS_FILE"
  return 1
}

start() {
  local p
  running >/dev/null && return 0      # as systemctl start: nothing to do when active
  [ -x "$BIN_DIR/kubelet" ] || die "$BIN_DIR/kubelet missing"
  mkdir -p "$(dirname "$LOG")"
  echo "==== $(date -u +%FT%T.%NZ) kubelet.sh start" >> "$LOG"
  # Its own session: an ssh session or a ^C in make that ends does not take it along.
  setsid "$BIN_DIR/kubelet" \
    --config="$STATE_DIR/kubelet-config.yaml" \
    --kubeconfig="$STATE_DIR/kubelet.kubeconfig" \
    --root-dir="$KUBELET_ROOT" \
    --hostname-override="$NODE_NAME" \
    --node-ip="$NODE_IP" \
    --v=2 >> "$LOG" 2>&1 < /dev/null 8>&- &   # 8: run.sh's lock, which must not outlive it
  p=$!
  if grep -q '^kubelet ' "$PIDS_FILE" 2>/dev/null; then
    awk -v l="kubelet $p $(proc_start "$p")" '$1 == "kubelet" { print l; next } { print }' "$PIDS_FILE" > "$PIDS_FILE.tmp"
    mv -f "$PIDS_FILE.tmp" "$PIDS_FILE"
  else
    record_pid kubelet "$p"
  fi
  log "kubelet started (pid $p)"
}

stop() {
  local p i
  p=$(running) || return 0
  kill -TERM "$p"
  for ((i = 0; i < 200; i++)); do running >/dev/null || break; sleep 0.1; done
  if running >/dev/null; then kill -KILL "$p"; log "kubelet killed (pid $p) after 20s"; sleep 0.2
  else log "kubelet stopped (pid $p)"; fi
  echo "==== $(date -u +%FT%T.%NZ) kubelet.sh stop (pid $p)" >> "$LOG"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  restart) stop; start ;;
  is-active) if running >/dev/null; then echo active; else echo inactive; exit 3; fi ;;
  *) die "usage: kubelet.sh start|stop|restart|is-active" ;;
esac
