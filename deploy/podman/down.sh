#!/usr/bin/env bash
# Removes a cluster started by deploy/podman/up.sh: its containers (workers first, each
# stopped with SIGTERM and a grace period, so running trainers end and the coordinator
# closes its database), network, volumes, join-token secret and token files. The shared
# directory holds the jobs' data and results and is left as it is.
#
#   deploy/podman/down.sh [--name NAME]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
name=llamafleet
while [ $# -gt 0 ]; do
  case "$1" in
    --name) name="$2"; shift ;;
    -h | --help) sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
    *) echo "down.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done
[[ "$name" =~ ^[a-z][a-z0-9-]{0,30}$ ]] || { echo "down.sh: --name: not a cluster name: '$name'" >&2; exit 2; }
label="io.llamafleet.cluster=$name"
# podman without systemd or syslog complains on stderr about both; real errors still show.
pm() { podman "$@" 2>&1 >/dev/null | grep -vE 'systemd connection|syslog' >&2 || true; }

workers=$(podman ps -a -q --filter "label=$label" --filter "name=^$name-worker-[0-9]+\$")
# shellcheck disable=SC2086
[ -z "$workers" ] || podman stop -t 20 $workers >/dev/null 2>&1 || true
podman stop -t 30 "$name-coordinator" >/dev/null 2>&1 || true
left=$(podman ps -a -q --filter "label=$label")
# shellcheck disable=SC2086
[ -z "$left" ] || pm rm -f -v $left
if podman network exists "$name"; then pm network rm "$name"; fi
volumes=$(podman volume ls -q --filter "label=$label")
# shellcheck disable=SC2086
[ -z "$volumes" ] || pm volume rm -f $volumes
podman secret rm "$name-join-token" >/dev/null 2>&1 || true
state="${LLAMAFLEET_PODMAN_STATE:-$HOME/.local/state/llamafleet-podman}/$name"
rm -f "$state/admin-token" "$state/join-token"
rmdir "$state" 2>/dev/null || true  # kept when the default shared directory lives in it
echo "down.sh: removed cluster $name" >&2
