#!/usr/bin/env bash
# test-lanes.sh [GO TEST FLAGS...]: every test of the module in two lanes that run side by side,
# each through scripts/gotest.sh with -p 1: test/e2e, the longest package (about half of the
# whole), and every other package, one after the other.
#
# Why two: the end-to-end suites mostly wait (on their cluster's controllers, kwok's pod
# lifecycle, the operator's polls): with one package at a time, `make test` kept 0.7 of one core
# busy on average over 57 minutes on a 2-core machine. Each suite starts its own cluster on its
# own ports, pod network and work directory (test/cluster), so two run side by side. More lanes
# would run more clusters than two cores keep up with.
#
# Each line is prefixed with its lane's name. Once both lanes are done it prints the slowest tests
# of each package that ran on a cluster (test/cluster's timings, which go test hides for a
# package that passed), then a failed lane's digest (scripts/gotest.sh) again, without the
# prefix, so that the end of a CI log says why.
# Interrupted, both lanes are stopped: their test binaries stop their clusters on SIGTERM.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/.."

e2e=github.com/linkerd/trust-rotation/test/e2e
rest=$(go list ./... | grep -vx "$e2e") || exit 1
logs=$(mktemp -d "${TMPDIR:-/tmp}/test-lanes.XXXXXX")
export TRUST_ROTATION_TEST_TIMINGS=$logs/timings # test/cluster.TimingsFileEnv

# lane NAME ARGS...: runs gotest.sh ARGS, its output kept in $logs/NAME and printed prefixed.
lane() {
  local name=$1
  shift
  "$here/gotest.sh" "$@" 2>&1 | tee "$logs/$name" | sed -u "s/^/$name | /"
  return "${PIPESTATUS[0]}"
}

trap 'trap "" INT TERM; kill -TERM 0; wait; exit 130' INT TERM
lane e2e "$@" -p 1 -timeout 80m "$e2e" &
e2e_pid=$!
# shellcheck disable=SC2086 # one argument per package
lane rest "$@" -p 1 -timeout 80m $rest &
rest_pid=$!

e2e_status=0 rest_status=0
wait "$e2e_pid" || e2e_status=$?
wait "$rest_pid" || rest_status=$?

if [[ -s $logs/timings ]]; then
  echo
  echo "==> the slowest tests of each package on a cluster:"
  sort "$logs/timings"
fi
status=0
for pair in "e2e:$e2e_status" "rest:$rest_status"; do
  name=${pair%%:*}
  if [[ ${pair#*:} -ne 0 ]]; then
    status=1
    echo
    echo "==> lane $name failed:"
    sed -n '/^==> go test .* failed/,$p' "$logs/$name"
  fi
done
rm -rf "$logs"
exit "$status"
