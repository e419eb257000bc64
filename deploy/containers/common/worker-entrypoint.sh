#!/bin/sh
# Entry point of the worker images. The agent starts as root only to hand its trainers an
# unprivileged user: a worker that knows --run-as keeps root for itself and runs
# trainers as `llamafleet`; an older worker is started as `llamafleet` outright. Started
# as any other user (Kubernetes runAsUser, podman --user) it simply runs as that user.
set -eu
if [ "$(id -u)" != 0 ]; then
  exec /opt/llamafleet/bin/llamafleet-worker "$@"
fi
if /opt/llamafleet/bin/llamafleet-worker --help 2>/dev/null | grep -q -- '--run-as'; then
  exec /opt/llamafleet/bin/llamafleet-worker --run-as "${LLAMAFLEET_RUN_AS:-llamafleet}" "$@"
fi
exec setpriv --reuid=llamafleet --regid=llamafleet --init-groups --no-new-privs \
  --bounding-set=-all /opt/llamafleet/bin/llamafleet-worker "$@"
