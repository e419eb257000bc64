#!/usr/bin/env bash
# CI's proof that tests/gpu builds and runs from the kit alone: makes the kit on this host
# (tests/gpu/kit.sh, from its Debian packages) and prints its size, then, in the trixie root
# of tests/cuda/build.sh (CUDA LibTorch 2.6, no GPU), runs `tests/gpu/run.sh --cpu`
# (build with the kit, then every step on the CPU) to its last line, and checks with
# tests/gpu/check_kit_deps.py that no header or library came from outside the kit and
# the packages a GPU machine has. Shares the root's ccache; build in build-cuda/gpu-kit.
#
#   tests/gpu/ci.sh           # as root, where tests/cuda/build.sh runs
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build-cuda/gpu-kit
if [ "${1:-}" != --in-root ]; then
  bash tests/gpu/kit.sh
  exec bash tests/cuda/build.sh --run bash tests/gpu/ci.sh --in-root
fi
log="$build/run-cpu.log"
mkdir -p "$build"
status=0
BUILD="$build" LLAMAFLEET_GPU_KIT=tests/gpu/kit bash tests/gpu/run.sh --cpu --json "$build/gpu-run-cpu.json" 2>&1 |
  tee "$log" || status=$?
last="$(tail -1 "$log")"
case "$last" in
  "run.sh: done in "*": every check passed") ;;
  *) echo "gpu/ci.sh: tests/gpu/run.sh --cpu did not pass (exit $status): $last" >&2; exit 1 ;;
esac
python3 tests/gpu/check_kit_deps.py --build "$build"
