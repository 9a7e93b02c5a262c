# The upstream External Storage suite (e2e.test, built by build.sh), as make e2e
# (test/e2e/run.sh) and make e2e-multinode (test/e2e/multinode/run.sh) run it. Source it
# after lib.sh; do not run it.
#
# The caller provides: note MESSAGE (a summary line), the counters PASSED and FAILED, the
# array failed (names of failed steps), SUITE_DIR (where each pass writes its log and
# junit files), and ssh_env (suite_ssh_env sets it).
# shellcheck shell=bash

# suite_ssh_env: ssh_env=(KUBE_SSH_KEY_PATH=... KUBE_SSH_USER=root) when up.sh made the
# key its sshd accepts (the [Disruptive] tests ssh to the pod's node), else empty.
suite_ssh_env() {
  ssh_env=()
  if [ -s "$STATE_DIR/ssh/id_ed25519" ]; then
    ssh_env=(KUBE_SSH_KEY_PATH="$STATE_DIR/ssh/id_ed25519" KUBE_SSH_USER=root)
  fi
}

# suite_pass NAME PROCS FOCUS SKIP TESTDRIVER: one run of e2e.test against TESTDRIVER,
# its log and junit files in $SUITE_DIR (NAME "suite") or $SUITE_DIR/NAME/, its counts in
# the summary and the totals, its failed specs by name.
suite_pass() { suite_start "$@" && suite_wait "$1"; }

# suite_start NAME PROCS FOCUS SKIP TESTDRIVER: suite_pass's run, started in the
# background; suite_wait NAME waits for it and counts it. Passes against different
# drivers may run at once: the suite waits on pods, the kubelet and the API server far
# more than it computes, so two passes side by side take less than one after the other
# (test/e2e/README.md has the figures). suite_stop stops every pass still running (the
# caller's trap, before the cluster goes down).
declare -gA SUITE_PID=() SUITE_T0=()
suite_start() {
  local name=$1 procs=$2 focus=$3 skip=$4 driver=$5 dir args
  dir=$(suite_dir "$name")
  mkdir -p "$dir"
  SUITE_T0[$name]=$(date +%s)
  # -kubectl-path: the suite's own kubectl, not whatever one the host has on its PATH.
  args=(-kubeconfig="$ADMIN_KUBECONFIG" -storage.testdriver="$driver" -kubectl-path="$KUBECTL"
        -kubelet-root-dir="$KUBELET_ROOT" -report-dir="$dir" -ginkgo.no-color -ginkgo.v
        -ginkgo.focus="$focus" -ginkgo.timeout=2h)
  [ -n "$skip" ] && args+=(-ginkgo.skip="$skip")
  log "$name: e2e.test ${args[*]} (procs $procs; log $dir/e2e.log)"
  # The suite's own temporary files (a kuberc per kubectl call, hundreds a run) go to
  # its directory, removed after it, not to the host's /tmp.
  local env=("${ssh_env[@]}" TMPDIR="$dir/tmp")
  rm -rf "$dir/tmp" && mkdir -p "$dir/tmp"
  if [ "$procs" -gt 1 ]; then
    # The ginkgo CLI runs the precompiled e2e.test in $procs processes; [Serial] specs
    # (when selected) still run alone, at the end.
    (cd "$dir" && exec env "${env[@]}" "$BIN_DIR/ginkgo" --procs="$procs" --no-color --silence-skips --timeout=2h \
      "$BIN_DIR/e2e.test" -- "${args[@]}" > "$dir/e2e.log" 2>&1) &
  else
    (cd "$dir" && exec env "${env[@]}" "$BIN_DIR/e2e.test" "${args[@]}" > "$dir/e2e.log" 2>&1) &
  fi
  SUITE_PID[$name]=$!
}

suite_dir() { if [ "$1" = suite ]; then echo "$SUITE_DIR"; else echo "$SUITE_DIR/$1"; fi; }

suite_wait() {
  local name=$1 dir rc=0 ran res
  dir=$(suite_dir "$name")
  # wait is interruptible: a signal reaches the caller's trap at once, which stops the pass.
  wait "${SUITE_PID[$name]}" || rc=$?
  unset "SUITE_PID[$name]"
  rm -rf "$dir/tmp"
  ran=$(grep -aE '^Ran [0-9]+ of [0-9]+ Specs' "$dir/e2e.log" | tail -1) || true
  res=$(grep -aE '^(SUCCESS|FAIL)! -- ' "$dir/e2e.log" | tail -1) || true
  note "$name: $(( $(date +%s) - SUITE_T0[$name] ))s, ${ran:-no result line}; ${res:-see log} (exit $rc, $dir/e2e.log)"
  # "SUCCESS! -- 54 Passed | 0 Failed | ..."; no such line: the suite did not finish.
  if [[ $res =~ ([0-9]+)\ Passed\ \|\ ([0-9]+)\ Failed ]]; then
    PASSED=$(( PASSED + BASH_REMATCH[1] )) FAILED=$(( FAILED + BASH_REMATCH[2] ))
  elif [ "$rc" != 0 ]; then
    FAILED=$(( FAILED + 1 ))
  fi
  # The failed specs, by name (ginkgo's closing summary lists them as "[FAIL] ...").
  grep -aE '^\s*\[FAIL\]' "$dir/e2e.log" | sed 's/^\s*/  /' | sort -u || true
  [ "$rc" = 0 ] || failed+=("$name")
  return 0
}

suite_stop() {
  local name pid
  for name in "${!SUITE_PID[@]}"; do
    pid=${SUITE_PID[$name]}
    if kill -0 "$pid" 2>/dev/null; then
      log "interrupted: stopping the suite's $name pass (pid $pid)"
      kill -TERM "$pid"; wait "$pid"
    fi
  done
}
