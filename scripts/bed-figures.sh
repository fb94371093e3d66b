#!/usr/bin/env bash
# Prints the test bed's figures (never asserts them): tools build times, cluster start-up time,
# Linkerd PKI issuance, time to bring 1,000 kwok pods to Running, and the bed's memory.
#
#   scripts/bed-figures.sh [--cold] [bedfigures flags, e.g. --pods 5000]
#
# The warm build time is a rerun of scripts/tools.sh bin-dir against the populated cache. --cold
# also times a build of every component from scratch: into an empty tools cache AND an empty Go
# build cache (only the module download cache is shared), which takes ~20-25 minutes on 2 cores.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

cold=false
if [ "${1:-}" = --cold ]; then cold=true; shift; fi

secs() { awk -v s="$1" -v e="$2" 'BEGIN { printf "%.1fs", e - s }'; }

if $cold; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  start=$(date +%s.%N)
  TRUST_ROTATION_CACHE=$tmp/cache GOCACHE=$tmp/gocache scripts/tools.sh bin-dir >/dev/null
  printf '%-50s %s\n' "tools build, cold (empty tools and Go caches)" "$(secs "$start" "$(date +%s.%N)")"
  rm -rf "$tmp"
fi

start=$(date +%s.%N)
bin=$(scripts/tools.sh bin-dir)
printf '%-50s %s\n' "tools build, warm (scripts/tools.sh bin-dir rerun)" "$(secs "$start" "$(date +%s.%N)")"
$cold || printf '%-50s %s\n' "tools build, cold" "not measured (pass --cold; ~20-25 min)"

go build -o "$root/bin/bedfigures" ./test/cmd/bedfigures
TRUST_ROTATION_TOOLS_BIN=${TRUST_ROTATION_TOOLS_BIN:-$bin} "$root/bin/bedfigures" "$@" 2>"$root/bin/bedfigures.log" \
  || { echo "bedfigures failed; see $root/bin/bedfigures.log" >&2; tail -n 20 "$root/bin/bedfigures.log" >&2; exit 1; }
