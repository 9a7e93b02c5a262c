#!/usr/bin/env bash
# hack/render-deploy.sh [--check]: regenerate deploy/*.yaml from charts/filevol with
# the Helm SDK (hack/tools/cmd/render-deploy; the variants are listed in
# hack/tools/chartrender/deploy.go). --check only compares and exits 1 on drift;
# `go test ./...` in hack/tools does the same check (TestDeployDrift).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root/hack/tools"
exec go run ./cmd/render-deploy -root "$root" "$@"
