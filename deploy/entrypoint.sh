#!/bin/sh
# The container's entry point: the first argument names what to run, e.g. `rooms`, `init keys`.
# Runs under tini (PID 1), which forwards SIGTERM: each service drains on it and exits 0.
set -eu
app=$(CDPATH= cd -- "$(dirname -- "$0")" && pwd)
if [ -n "${PARLEY_ENV_FILE:-}" ]; then
  # compose: variables that exist only once parley-init has run (governance's signing seed).
  set -a
  . "$PARLEY_ENV_FILE"
  set +a
fi
what=${1:-}
[ $# -gt 0 ] && shift
case "$what" in
  rooms | registry | governance | consent | mcp | gateway)
    exec node "$app/node_modules/@parley/$what/dist/main.js" "$@"
    ;;
  init)
    exec node "$app/node_modules/@parley/init/dist/main.js" "$@"
    ;;
  bridge)
    exec node "$app/node_modules/@parley/bridge/dist/main.js" "$@"
    ;;
  *)
    echo "usage: <rooms | registry | governance | consent | mcp | gateway | bridge | init keys | init backbone>" >&2
    exit 64
    ;;
esac
