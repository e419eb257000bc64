#!/bin/sh
# Entry point of the CUDA worker image: makes a mounted or layered-in aws-ofi-nccl plugin
# and AWS libfabric (/opt/amazon/ofi-nccl, /opt/amazon/efa; listed in
# /etc/ld.so.conf.d/aws-efa.conf) visible to the loader's cache, so NCCL's dlopen() of
# libnccl-net.so finds them however minimal a trainer's environment is, then hands over to
# the common worker entry point. Without them NCCL uses its socket transport (NET/Socket).
set -eu
if [ "$(id -u)" = 0 ] && [ -d /opt/amazon ]; then
  ldconfig || echo "cuda-entrypoint: ldconfig failed; NCCL may not find the EFA plugin" >&2
fi
exec /usr/local/lib/llamafleet/worker-entrypoint.sh "$@"
