#!/usr/bin/env bash
# Installs a llamafleet build and its systemd units on this host:
#   /opt/llamafleet/bin        the binaries (and the trainer's SentencePiece module)
#   /opt/llamafleet/libexec    llamafleet-worker-start (deploy/containers/common/worker-entrypoint.sh)
#   /etc/systemd/system        llamafleet-coordinator.service, llamafleet-worker.service
#   /etc/llamafleet            coordinator.yaml, coordinator.env, worker.env and join-token
#                              (made here when missing; existing ones are kept)
# and the system user `llamafleet`. The host needs the runtime libraries the build links
# (deploy/local/install-deps.sh installs them). Then edit /etc/llamafleet/*.env and
# start the role(s) this host plays: systemctl enable --now llamafleet-coordinator
# (or llamafleet-worker).
#
#   deploy/systemd/install.sh [--build-dir DIR] [--root DIR] [--role coordinator|worker|all]
# --root DIR installs into DIR as if it were / (a package tree or an image; no user is
# added and systemd is not told).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../.."
build_dir="${LLAMAFLEET_BUILD_DIR:-build}"
dest=""
role=all
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build_dir="$2"; shift ;;
    --root) dest="$2"; shift ;;
    --role) role="$2"; shift
      case "$role" in coordinator | worker | all) ;; *) echo "install.sh: --role: coordinator, worker or all, not '$role'" >&2; exit 2 ;; esac ;;
    -h | --help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
    *) echo "install.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done
bin="$build_dir/bin"
files=(llamafleet)  # the CLI
case "$role" in
  coordinator) files+=(llamafleet-coordinator llamafleet-health-probe) ;;
  worker) files+=(llamafleet-worker llamafleet-train libllamafleet_spm.so) ;;
  all) files+=(llamafleet-coordinator llamafleet-health-probe llamafleet-worker llamafleet-train libllamafleet_spm.so) ;;
esac
for f in "${files[@]}"; do
  [ -e "$bin/$f" ] || { echo "install.sh: $bin/$f is missing: build it first (cmake --build $build_dir)" >&2; exit 1; }
done
if [ -z "$dest" ] && [ "$(id -u)" -ne 0 ]; then echo "install.sh: run as root (or with --root DIR)" >&2; exit 1; fi

install -d -m 0755 "$dest/opt/llamafleet/bin" "$dest/opt/llamafleet/libexec" "$dest/etc/systemd/system" \
  "$dest/usr/local/bin"
install -d -m 0750 "$dest/etc/llamafleet"
for f in "${files[@]}"; do install -m 0755 "$bin/$f" "$dest/opt/llamafleet/bin/$f"; done
for f in llamafleet llamafleet-coordinator; do
  [ ! -e "$dest/opt/llamafleet/bin/$f" ] || ln -sf "/opt/llamafleet/bin/$f" "$dest/usr/local/bin/$f"
done
units=()
[ "$role" = worker ] || units+=(llamafleet-coordinator.service)
[ "$role" = coordinator ] || units+=(llamafleet-worker.service)
for u in "${units[@]}"; do install -m 0644 "$here/$u" "$dest/etc/systemd/system/$u"; done
if [ "$role" != coordinator ]; then
  install -m 0755 deploy/containers/common/worker-entrypoint.sh "$dest/opt/llamafleet/libexec/llamafleet-worker-start"
fi

# Configuration: written once, then the operator's.
keep_or_write() {  # keep_or_write FILE MODE: stdin becomes FILE unless it exists
  if [ -e "$1" ]; then cat >/dev/null; echo "install.sh: kept $1" >&2; else install -m "$2" /dev/stdin "$1"; fi
}
if [ "$role" != worker ]; then
  keep_or_write "$dest/etc/llamafleet/coordinator.yaml" 0644 <<'YAML'
# llamafleet-coordinator --config (flags win over it).
listen: 0.0.0.0:50051
http_listen: 0.0.0.0:8080
synchronous: full
log_level: info
queues:
  default: {gpu_quota: 0}   # 0: no GPU quota
  research: {gpu_quota: 0}
YAML
  keep_or_write "$dest/etc/llamafleet/coordinator.env" 0644 <<'ENV'
# The shared filesystem (FSx for Lustre, NFS...) mounted at the same path on every node:
# jobs' data, checkpoint and export paths must lie in it.
LLAMAFLEET_PATH_ROOT=/fsx
# More flags, e.g. TLS: --tls-cert /etc/llamafleet/tls.crt --tls-key /etc/llamafleet/tls.key
LLAMAFLEET_COORDINATOR_ARGS=
ENV
fi
if [ "$role" != coordinator ]; then
  keep_or_write "$dest/etc/llamafleet/worker.env" 0644 <<'ENV'
# The coordinator this worker joins (HOST:PORT).
LLAMAFLEET_COORDINATOR=coordinator.example:50051
# More flags: --tls-ca FILE, --instance-type p5.48xlarge, --labels k=v, --cpu-ranks N
# (CPU-only hosts), --address IP (the address other nodes reach this one at; default the
# host name).
LLAMAFLEET_WORKER_ARGS=
ENV
fi
if [ ! -e "$dest/etc/llamafleet/join-token" ]; then
  (umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dest/etc/llamafleet/join-token")
  echo "install.sh: made /etc/llamafleet/join-token: copy it to every worker host" >&2
fi

if [ -z "$dest" ]; then
  # uid/gid 10001 where free: the same ids as in the images, so the shared filesystem's
  # ownership means the same on container and bare-metal nodes.
  if ! getent group llamafleet >/dev/null; then
    gid=(--gid 10001)
    ! getent group 10001 >/dev/null || gid=()
    groupadd --system "${gid[@]}" llamafleet
  fi
  if ! getent passwd llamafleet >/dev/null; then
    uid=(--uid 10001)
    ! getent passwd 10001 >/dev/null || uid=()
    useradd --system "${uid[@]}" --gid llamafleet --home-dir /var/lib/llamafleet --no-create-home \
      --shell /usr/sbin/nologin llamafleet
  fi
  # The coordinator (and a worker without --run-as, after dropping to llamafleet) reads the
  # token and the configuration: root-owned, group llamafleet.
  chgrp llamafleet /etc/llamafleet /etc/llamafleet/join-token
  chmod 0640 /etc/llamafleet/join-token
  if [ -d /run/systemd/system ]; then
    systemctl daemon-reload
    echo "install.sh: installed; start with: systemctl enable --now ${units[*]}" >&2
  else
    echo "install.sh: installed; systemd is not running here, so nothing was started" >&2
  fi
fi
