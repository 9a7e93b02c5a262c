#!/usr/bin/env bash
# Runs every Go fuzz target of the project for FUZZTIME each (default 30s)
# and prints a table: target, time, executions, result. Seed corpora live
# in each package's testdata/fuzz/ and in the f.Add calls.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZTIME=${FUZZTIME:-30s}
out=_output/fuzz; mkdir -p "$out"
report=$out/report.md
printf '| package | target | time | executions | result |\n|---|---|---|---|---|\n' > "$report"
fail=0
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for t in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
    log=$out/${t}.log
    if go test -run '^$' -fuzz "^${t}\$" -fuzztime "$FUZZTIME" "$pkg" >"$log" 2>&1; then res=ok; else res=FAIL; fail=1; fi
    execs=$(grep -o 'execs: [0-9]*' "$log" | tail -1 | awk '{print $2}')
    printf '| %s | %s | %s | %s | %s |\n' "${pkg#github.com/filevol/filevol/}" "$t" "$FUZZTIME" "${execs:-?}" "$res" | tee -a "$report"
  done
done
echo "report: $report"
exit $fail
