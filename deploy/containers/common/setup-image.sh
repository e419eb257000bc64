#!/bin/sh
# Run once inside every llamafleet image while it is built (coordinator, CPU worker, CUDA
# worker), so what they share is written once: the unprivileged `llamafleet` user and
# group with fixed ids (10001, so host directories and Kubernetes fsGroup can name them),
# the state directories, and the loader path for the libraries staged in /opt/llamafleet/lib.
set -eu
uid=10001
getent group llamafleet >/dev/null || groupadd --system --gid "$uid" llamafleet
getent passwd llamafleet >/dev/null ||
  useradd --system --uid "$uid" --gid llamafleet --home-dir /var/lib/llamafleet \
    --no-create-home --shell /usr/sbin/nologin llamafleet
# Coordinator state (SQLite) and worker state (task files, credentials): owned by the
# service user, closed to others.
install -d -m 0750 -o llamafleet -g llamafleet /var/lib/llamafleet /var/lib/llamafleet-worker
# The binaries' own libraries (those the base lacks) live apart from the distribution's.
echo /opt/llamafleet/lib >/etc/ld.so.conf.d/llamafleet.conf
ldconfig
for b in /opt/llamafleet/bin/llamafleet*; do ln -sf "$b" /usr/local/bin/; done
# Every binary must load: a missing library fails the image build, not the first job.
for b in /opt/llamafleet/bin/*; do
  # (ldd says "not a dynamic executable" on stderr for the statically linked front.)
  if ldd "$b" 2>/dev/null | grep -q 'not found'; then
    echo "setup-image: $b misses libraries:" >&2
    ldd "$b" | grep 'not found' >&2
    exit 1
  fi
done
