#!/usr/bin/env bash
# Runs the filevol benchmarks (make bench): test/bench starts bin/filevol on
# a fresh pool under /tmp/filevol-bench, measures it over its CSI socket and
# writes _output/bench/report.md. Targets are reported, never asserted: the
# exit code is non-zero only when the harness itself fails. On ext4 without
# a journal it first waits until six minutes after the last run ended
# (test/bench/settle.go: that run's freed inodes slow every create).
#
#   ITERATIONS=2000 make bench           # serial CreateVolume samples
#   ./hack/bench.sh --lifecycle 50 --driver-v 4 --keep   # any flag of test/bench
#   go run ./test/bench --help           # all flags
set -euo pipefail
cd "$(dirname "$0")/.."

ITERATIONS=${ITERATIONS:-1000}
OUT=${OUT:-_output/bench/report.md}

if [ "$(id -u)" -ne 0 ]; then
  echo "bench: needs root (loop devices, mounts)" >&2
  exit 1
fi
# make bench builds first; a direct call builds only when the binary is missing.
[ -x bin/filevol ] || make build

exec go run ./test/bench --bin bin/filevol --out "$OUT" --iterations "$ITERATIONS" "$@"
