#!/usr/bin/env bash
# gotest.sh ARGS...: `go test ARGS...`, its output streamed as usual and kept in a file; when it
# fails, it ends with a digest of the failures: every `--- FAIL` line and the first line of every
# message a test reported, then the path of the whole output.
#
# A failing end-to-end test prints the tail of the cluster's component logs after its own
# messages (cluster.DumpLogsOnFailure), so whoever sees only the end of a CI log would otherwise
# see logs and not why the test failed.
set -uo pipefail

out=$(mktemp "${TMPDIR:-/tmp}/gotest.XXXXXX")
go test "$@" 2>&1 | tee "$out"
status=${PIPESTATUS[0]}
if [[ $status -ne 0 ]]; then
  echo
  echo "==> go test $* failed (exit $status). Failures:"
  # Test messages are indented file_test.go:LINE: lines; component log lines never start so.
  grep -E '^(\s*--- FAIL|FAIL\s|panic:|\s+[A-Za-z0-9_]+\.go:[0-9]+: )' "$out" | cut -c1-400 | tail -n 60
  echo "==> the whole output: $out"
else
  rm -f "$out"
fi
exit "$status"
