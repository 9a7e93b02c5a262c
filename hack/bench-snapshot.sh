#!/usr/bin/env bash
# The figures of snapshots, restores, the copy engine and online expansion.
# Go benchmarks in test/snapshot, on pools they make on loop files under
# /tmp/filevol-test/snapshot (xfs with reflink, ext4), driving the real
# services over their socket:
#
#   BenchmarkReflinkSnapshot  CreateSnapshot of a mounted xfs volume holding
#                             256 MiB / 1 GiB / 4 GiB, and CreateVolume from it
#   BenchmarkCopyEngine       ext4 pool: snapshot of 1 GiB written in a 10 GiB
#                             volume vs the pool's sequential copy of 1 GiB
#   BenchmarkExpandOnline     1 GiB -> 10 GiB of a mounted xfs, btrfs, ext4
#                             (ext4 offline at stage without CAP_SYS_RESOURCE)
#   BenchmarkGroupSnapshot    CreateVolumeGroupSnapshot of 8 mounted xfs volumes
#                             of 1 GiB holding 512 MiB each (all frozen at once),
#                             and the same 8 snapshotted one by one for scale
#
# Each benchmark takes its own samples after one setup and reports
# percentiles (-benchtime=1x; ns/op is the whole run). Targets are reported,
# not asserted. Needs root; about three minutes and 10 GiB of disk.
#
#   ./hack/bench-snapshot.sh                       # everything
#   BENCH=ReflinkSnapshot ./hack/bench-snapshot.sh # one of them
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" -ne 0 ]; then
  echo "bench-snapshot: needs root (loop devices, mounts)" >&2
  exit 1
fi
OUT=${OUT:-_output/bench/snapshot.txt}
mkdir -p "$(dirname "$OUT")"
# The in-process driver logs through klog on stderr; keep the figures.
go test -run '^$' -bench "${BENCH:-.}" -benchtime 1x -timeout 60m -v ./test/snapshot/ 2>&1 |
  grep -Ev '^[IEW][0-9]{4} ' | tee "$OUT"
echo "bench-snapshot: figures in $OUT"
