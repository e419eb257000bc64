#!/usr/bin/env bash
# A llamafleet cluster of containers on this machine: a coordinator and N CPU workers on
# their own podman network, the host directory DIR mounted at the same absolute path in
# every container (the shared filesystem, as FSx for Lustre is on every node of a real
# cluster; it is the jobs' path root). The gRPC and HTTP ports are published on 127.0.0.1
# only. Prints, one per line:
#   coordinator 127.0.0.1:PORT
#   portal http://127.0.0.1:PORT/ui/
#   admin-token FILE
#   shared DIR
# Needs the images of deploy/containers/build.sh. deploy/podman/down.sh removes it all.
#
#   deploy/podman/up.sh [--name NAME] [--workers N] [--shared DIR] [--cpu-ranks R]
#                       [--tag TAG] [--coordinator-args "ARGS"] [--worker-args "ARGS"]
#                       [--worker-image IMAGE]
#
# --worker-image runs the workers from IMAGE instead of localhost/llamafleet-worker:TAG
# (e.g. localhost/llamafleet-worker-cuda:TAG, which runs CPU jobs without a GPU too).
#
# Containers: NAME-coordinator, NAME-worker-1 … NAME-worker-N; network NAME; volumes
# NAME-coordinator-data and NAME-worker-I-data; secret NAME-join-token; tokens in
# $LLAMAFLEET_PODMAN_STATE/NAME (default ~/.local/state/llamafleet-podman/NAME).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=../containers/podman-env.sh
. "$here/../containers/podman-env.sh"

name=llamafleet
workers=2
shared=""
cpu_ranks=1
tag="${LLAMAFLEET_IMAGE_TAG:-latest}"
coordinator_args=""
worker_args=""
worker_image=""
usage() { sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --name) name="$2"; shift ;;
    --workers) workers="$2"; shift ;;
    --shared) shared="$2"; shift ;;
    --cpu-ranks) cpu_ranks="$2"; shift ;;
    --tag) tag="$2"; shift ;;
    --coordinator-args) coordinator_args="$2"; shift ;;
    --worker-args) worker_args="$2"; shift ;;
    --worker-image) worker_image="$2"; shift ;;
    -h | --help) usage ;;
    *) echo "up.sh: unknown argument '$1'" >&2; usage ;;
  esac
  shift
done
fail() { echo "up.sh: $*" >&2; exit 1; }
# Names become container, network and DNS names.
[[ "$name" =~ ^[a-z][a-z0-9-]{0,30}$ ]] || fail "--name: lower-case letters, digits and '-', starting with a letter, at most 31 characters"
[[ "$workers" =~ ^[0-9]+$ ]] && ((workers >= 1 && workers <= 64)) || fail "--workers: a number from 1 to 64"
[[ "$cpu_ranks" =~ ^[0-9]+$ ]] && ((cpu_ranks >= 1)) || fail "--cpu-ranks: a number >= 1"
state="${LLAMAFLEET_PODMAN_STATE:-$HOME/.local/state/llamafleet-podman}/$name"
[ -n "$shared" ] || shared="$state/shared"
case "$shared" in /*) ;; *) shared="$PWD/$shared" ;; esac
case "$shared" in *[!A-Za-z0-9_./-]*) fail "--shared: only letters, digits and _ . / - in the path (it is mounted at the same path in every container)" ;; esac

coordinator_image="localhost/llamafleet-coordinator:$tag"
[ -n "$worker_image" ] || worker_image="localhost/llamafleet-worker:$tag"
for image in "$coordinator_image" "$worker_image"; do
  podman image exists "$image" || fail "no image $image: run deploy/containers/build.sh first"
done
label="io.llamafleet.cluster=$name"
if [ -n "$(podman ps -a -q --filter "label=$label")" ] || podman network exists "$name"; then
  fail "a cluster named $name is already up (deploy/podman/down.sh --name $name removes it)"
fi

# Whatever fails from here on, nothing half-started stays behind.
up_ok=0
on_exit() {
  if ((up_ok == 0)); then
    echo "up.sh: failed; coordinator log:" >&2
    podman logs --tail 30 "$name-coordinator" >&2 2>/dev/null || true
    "$here/down.sh" --name "$name" >/dev/null 2>&1 || true
  fi
}
trap on_exit EXIT

mkdir -p "$shared"
shared="$(cd "$shared" && pwd -P)"
# The containers run as the `llamafleet` user (uid/gid 10001): it writes checkpoints and
# exports into the shared directory, so that group may write there.
if [ "$(stat -c %g "$shared")" != 10001 ] && [ "$(id -u)" -eq 0 ]; then
  chgrp 10001 "$shared" && chmod g+rwxs "$shared"
  echo "up.sh: $shared is now group 10001 (the containers' llamafleet group), group-writable" >&2
fi

mkdir -p "$state"
chmod 0700 "$state"
umask 077
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$state/join-token"
podman secret create --label "$label" "$name-join-token" "$state/join-token" >/dev/null
rm -f "$state/join-token"  # the secret holds it now
secret="$name-join-token,type=mount,target=/run/secrets/llamafleet-join-token,uid=10001,gid=10001,mode=0400"

podman network create --label "$label" "$name" >/dev/null
podman volume create --label "$label" "$name-coordinator-data" >/dev/null

# Without systemd, podman reports on every run that it cannot add timers for health
# checks; that noise is dropped (up.sh runs the checks itself).
prun() { podman run "$@" 2> >(grep -v 'systemd connection' >&2); }
common=("${podman_runtime_opts[@]}" "${podman_ulimit_opts[@]}" --label "$label"
  --security-opt no-new-privileges)
# Health checks are run by up.sh itself (podman healthcheck run); automatic ones need
# systemd timers, which a container host without systemd lacks.
[ -d /run/systemd/system ] || common+=(--health-interval disable)

# An admin token, made in the (still empty) database before the coordinator starts.
prun --rm "${common[@]}" --network none -v "$name-coordinator-data:/var/lib/llamafleet" \
  "$coordinator_image" token create --data-dir /var/lib/llamafleet --user admin --role admin \
  >"$state/admin-token" 2>/dev/null || fail "could not create the admin token"
chmod 0600 "$state/admin-token"

# Jobs' paths must lie in the shared directory: the coordinator's path roots
# are set to it.
path_root=()
# (The help is read whole before it is searched: grep -q stopping early would fail the
# pipeline under pipefail.)
coordinator_help="$(prun --rm "${common[@]}" --network none "$coordinator_image" --help 2>&1 || true)"
if grep -q -- '--path-root' <<<"$coordinator_help"; then
  path_root=(--path-root "$shared")
fi
# shellcheck disable=SC2206  # word splitting of the extra arguments is intended
prun -d "${common[@]}" --name "$name-coordinator" --hostname "$name-coordinator" \
  --network "$name" -p 127.0.0.1::50051 -p 127.0.0.1::8080 \
  --cap-drop all \
  -v "$name-coordinator-data:/var/lib/llamafleet" -v "$shared:$shared" --secret "$secret" \
  "$coordinator_image" --listen 0.0.0.0:50051 --http-listen 0.0.0.0:8080 \
  --data-dir /var/lib/llamafleet --join-token-file /run/secrets/llamafleet-join-token \
  "${path_root[@]}" $coordinator_args >/dev/null
for _ in $(seq 1 120); do
  podman healthcheck run "$name-coordinator" >/dev/null 2>&1 && break
  [ "$(podman inspect -f '{{.State.Running}}' "$name-coordinator")" = true ] || fail "the coordinator exited"
  sleep 0.5
done
podman healthcheck run "$name-coordinator" >/dev/null 2>&1 || fail "the coordinator did not become healthy in 60 s"
grpc_port=$(podman port "$name-coordinator" 50051/tcp | head -1)
http_port=$(podman port "$name-coordinator" 8080/tcp | head -1)

# The workers share this machine's cores. Worker i gets the cores i, i+N, i+2N, … of this
# shell's affinity list as its cpuset (core i mod C, one each, when there are fewer cores
# than workers): a worker divides the cores it may run on among its ranks' OpenMP threads,
# and unpinned, every worker would count them all and the threads would outnumber the cores.
cores=()
for part in $(taskset -pc $$ 2>/dev/null | sed 's/.*: //' | tr ',' ' '); do
  if [[ "$part" == *-* ]]; then mapfile -t -O "${#cores[@]}" cores < <(seq "${part%-*}" "${part#*-}"); else cores+=("$part"); fi
done
cpuset_of() {  # cpuset_of I: worker I's cores, comma-separated (nothing: not pinned)
  local i=$1 n=${#cores[@]} mine=() j
  ((n > 0)) || return 0
  if ((n < workers)); then echo "${cores[$(((i - 1) % n))]}"; return 0; fi
  for ((j = i - 1; j < n; j += workers)); do mine+=("${cores[$j]}"); done
  (IFS=,; echo "${mine[*]}")
}

for i in $(seq 1 "$workers"); do
  w="$name-worker-$i"
  pin=()
  cpuset=$(cpuset_of "$i")
  [ -z "$cpuset" ] || pin=(--cpuset-cpus "$cpuset")
  podman volume create --label "$label" "$w-data" >/dev/null
  # MASTER_ADDR for a job is its node-0 worker's --address: the container's name, which
  # podman's DNS resolves on this network (and /etc/hosts inside the container itself,
  # which Gloo uses to pick its interface).
  # shellcheck disable=SC2206
  prun -d "${common[@]}" "${pin[@]}" --name "$w" --hostname "$w" --network "$name" \
    --cap-drop NET_RAW,MKNOD,AUDIT_WRITE,SYS_CHROOT,SETFCAP,NET_BIND_SERVICE --shm-size 1g \
    -v "$w-data:/var/lib/llamafleet-worker" -v "$shared:$shared" --secret "$secret" \
    "$worker_image" --coordinator "$name-coordinator:50051" \
    --join-token-file /run/secrets/llamafleet-join-token --data-dir /var/lib/llamafleet-worker \
    --cpu-ranks "$cpu_ranks" --name "$w" --address "$w" $worker_args >/dev/null
done

ready=0
for _ in $(seq 1 120); do
  ready=$(podman exec -e LLAMAFLEET_TOKEN="$(cat "$state/admin-token")" -e LLAMAFLEET_COORDINATOR=127.0.0.1:50051 \
    "$name-coordinator" llamafleet workers -o json 2>/dev/null | grep -o '"WORKER_READY"' | wc -l) || ready=0
  ((ready >= workers)) && break
  sleep 0.5
done
((ready >= workers)) || { podman logs --tail 20 "$name-worker-1" >&2 || true; fail "$ready of $workers workers registered in 60 s"; }

up_ok=1
echo "coordinator $grpc_port"
echo "portal http://$http_port/ui/"
echo "admin-token $state/admin-token"
echo "shared $shared"
