#!/usr/bin/env bash
# Starts and stops the local test bed (test/cmd/testbed) in the background, for trying the
# product by hand. Used by `make cluster-up` / `make cluster-down`.
#
#   scripts/testbed.sh up [testbed flags...]   start it; return once .local/kubeconfig is ready
#   scripts/testbed.sh down                    stop it (SIGTERM by PID) and wait until it exited
#
# Files in .local/: testbed.pid, testbed.log (its output), testbed.json (state), testbed.ready
# (marker written once ready), kubeconfig, logs/ (one log per component); with --clusters 2 also
# kubeconfig-east, work-east/ and logs/east/ (the linked cluster).
# TESTBED_TIMEOUT (seconds, default 300) bounds the wait for readiness and for the stop.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
local_dir=$root/.local
pidfile=$local_dir/testbed.pid
ready=$local_dir/testbed.ready
log=$local_dir/testbed.log
timeout=${TESTBED_TIMEOUT:-300}

# running prints the PID of a live testbed started by this script, if any. The PID file alone is
# not trusted: the PID must belong to a testbed process (PIDs are reused).
running() {
  [ -f "$pidfile" ] || return 1
  local pid
  pid=$(cat "$pidfile")
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q 'testbed up' || return 1
  echo "$pid"
}

up() {
  local pid
  if pid=$(running); then
    echo "testbed already running (pid $pid); KUBECONFIG=$local_dir/kubeconfig"
    return 0
  fi
  mkdir -p "$local_dir" "$root/bin"
  rm -f "$ready"
  (cd "$root" && go build -o "$root/bin/testbed" ./test/cmd/testbed)
  # setsid: its own session, so a Ctrl-C here or a closed terminal does not reach it; only
  # `down` (or a signal sent to its PID) stops it.
  setsid nohup "$root/bin/testbed" up --dir "$local_dir" "$@" >"$log" 2>&1 </dev/null &
  pid=$!
  echo "$pid" >"$pidfile"
  echo "testbed starting (pid $pid, log $log)..."
  local start=$SECONDS
  # Observe the ready marker; fail fast if the process dies, and give up after $timeout seconds.
  until [ -e "$ready" ]; do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "testbed exited before it was ready; last lines of $log:" >&2
      tail -n 40 "$log" >&2
      rm -f "$pidfile"
      return 1
    fi
    if (( SECONDS - start > timeout )); then
      echo "testbed not ready after ${timeout}s; stopping it. Last lines of $log:" >&2
      tail -n 40 "$log" >&2
      down
      return 1
    fi
    sleep 0.5
  done
  sed -n '/^Test bed ready/,$p' "$log"
  # The README's "Install" commands, as written, in the playground: helm is Helm 3
  # from the tools cache, linkerd-trust the CLI of this checkout, both in bin/.
  if [ -x "${TRUST_ROTATION_TOOLS_BIN:-}/helm3" ]; then
    ln -sf "$TRUST_ROTATION_TOOLS_BIN/helm3" "$root/bin/helm"
  fi
  (cd "$root" && go build -o "$root/bin/" ./cmd/linkerd-trust)
  echo "Tools for it (helm, linkerd-trust):"
  echo "  export PATH=$root/bin:\$PATH"
}

down() {
  local pid
  if ! pid=$(running); then
    echo "testbed is not running"
    # Leftovers of a testbed that was killed outright (its components died with it).
    rm -f "$pidfile" "$ready" "$local_dir/testbed.json" "$local_dir/kubeconfig" "$local_dir/kubeconfig-east"
    rm -rf "$local_dir/work" "$local_dir/work-east"
    return 0
  fi
  echo "stopping testbed (pid $pid)..."
  kill -TERM "$pid"
  # tail --pid returns when the process exits: an observed exit, bounded by $timeout.
  if ! timeout "$timeout" tail --pid="$pid" -f /dev/null; then
    echo "testbed did not exit within ${timeout}s; killing it (its components die with it)" >&2
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile"
  echo "testbed stopped"
}

cmd=${1:-}
shift || true
case $cmd in
  up) up "$@" ;;
  down) down ;;
  *) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
