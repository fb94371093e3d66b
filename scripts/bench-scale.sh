#!/usr/bin/env bash
# Measures the operator's own pod path in process at the sizes the bed cannot host, and prints
# (never asserts) the figures of docs/performance.md's "150,000 pods (in process)" section: the
# pod informer, index, live-certificate tracker with its probes and the State read, against a
# synthetic cluster in a second process (cmd/trust-rotation-operator/app/scale_*_test.go).
#
#   scripts/bench-scale.sh [pod counts, comma-separated; default 10000,50000,150000]
#
# No cluster and no tools needed. The full run takes about 15 minutes on 2 cores and about 2 GiB
# in the synthetic cluster's process at 150,000 pods.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
sizes=${1:-10000,50000,150000}

echo "== commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown); machine: $(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
go test -run '^$' -bench OperatorScale -benchtime 1x -timeout 90m ./cmd/trust-rotation-operator/app/ -scale.pods "$sizes"
