#!/usr/bin/env bash
# Measures the operator and the linkerd-trust CLI at scale and prints (never asserts) the figures
# of docs/performance.md: for each size a fresh local cluster with N meshed kwok pods (10 per
# namespace) under the mesh simulator, one full rotation, then `linkerd trust inspect`; then the
# `go test -bench` figures of the convergence accounting and the bundle rendering.
#
#   scripts/bench.sh [--sizes 1000,5000,10000] [--steady 1m] [--concurrency 10,50,200] [bench flags]
#
# Progress goes to stderr; the figures to stdout, ending with a Markdown table. The full run
# (1,000, 5,000 and 10,000 pods) takes about an hour on 2 cores and ~2 GiB at 10,000 pods.
# Operator logs and heap profiles land in bin/bench/.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

export TRUST_ROTATION_TOOLS_BIN=${TRUST_ROTATION_TOOLS_BIN:-$(scripts/tools.sh bin-dir)}
go build -o "$root/bin/" ./cmd/trust-rotation-operator ./cmd/linkerd-trust
go build -o "$root/bin/bench-rotation" ./test/cmd/bench

echo "== go test -bench: per-event convergence accounting and bundle rendering"
go test -run '^$' -bench . -benchmem ./steps/ ./steps/podindex/ ./steps/probe/ | grep -E '^(Benchmark|cpu:)'

echo "== machine: $(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
"$root/bin/bench-rotation" --operator "$root/bin/trust-rotation-operator" --cli "$root/bin/linkerd-trust" \
  --log-dir "$root/bin/bench" "$@"
