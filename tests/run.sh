#!/usr/bin/env bash
# Installs what the build and the tests need (Debian packages, only those missing),
# configures, builds with ccache, and runs every test with ctest. Safe to re-run.
# Exits non-zero on any failure.
#
#   tests/run.sh                 # everything
#   tests/run.sh -R storage      # extra arguments go to ctest (here: only matching tests)
#
# Environment: LLAMAFLEET_BUILD_DIR (default build), JOBS (default: number of cores),
# LLAMAFLEET_BUILD_TRAINER=OFF to skip the LibTorch trainer.
set -euo pipefail
cd "$(dirname "$0")/.."

bash deploy/local/install-deps.sh
# The portal browser test's npm dependency (playwright-core, from its package-lock.json).
bash tests/portal/run.sh --install

build_dir="${LLAMAFLEET_BUILD_DIR:-build}"
jobs="${JOBS:-$(nproc)}"
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
# Paths relative to the checkout, so a fresh clone elsewhere reuses the cache.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
# -g puts the build directory into the objects, and ccache then keys on it; without that
# key a second clone (or a worktree) of the same commit hits the cache.
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DLLAMAFLEET_BUILD_TRAINER="${LLAMAFLEET_BUILD_TRAINER:-ON}" -DLLAMAFLEET_BUILD_TESTS=ON >/dev/null
cmake --build "$build_dir" -j"$jobs"
ctest --test-dir "$build_dir" --output-on-failure --timeout 900 -j"$jobs" "$@"
