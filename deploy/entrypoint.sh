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
  rooms)
    # The ingress and the fan-out allocate per message: a 32 MB young generation (V8's default is
    # 16) halves their garbage-collection time per delivery (docs/operations.md, "Memory and GC").
    # NODE_OPTIONS naming a semi-space size of its own wins.
    case "${NODE_OPTIONS:-}" in
      *semi-space-size*) ;;
      *) export NODE_OPTIONS="${NODE_OPTIONS:+$NODE_OPTIONS }--max-semi-space-size=32" ;;
    esac
    exec node "$app/node_modules/@parley/rooms/dist/main.js" "$@"
    ;;
  registry | governance | consent | mcp | gateway)
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
