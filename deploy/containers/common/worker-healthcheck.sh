#!/bin/sh
# HEALTHCHECK of the worker images: the agent is PID 1's program and still running. The
# worker serves no port; whether it is connected is the coordinator's to say (heartbeats,
# `llamafleet workers`).
set -eu
exe=$(readlink /proc/1/exe 2>/dev/null || true)
case "$exe" in
  */llamafleet-worker) exit 0 ;;
  *) echo "PID 1 is ${exe:-unknown}, not llamafleet-worker" >&2; exit 1 ;;
esac
