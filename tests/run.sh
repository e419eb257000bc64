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

packages=(
  # toolchain
  cmake g++ make ccache pkg-config
  # coordinator, CLI, storage
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libssl-dev
  libsqlite3-dev libspdlog-dev libfmt-dev libyaml-cpp-dev libcli11-dev
  # tests
  libgtest-dev libgmock-dev
  # trainer
  libtorch-dev libgloo-dev libsentencepiece-dev sentencepiece
  python3-torch python3-sentencepiece python3-numpy
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]})); then
  echo "tests/run.sh: installing ${missing[*]}" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q
  $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

build_dir="${LLAMAFLEET_BUILD_DIR:-build}"
jobs="${JOBS:-$(nproc)}"
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DLLAMAFLEET_BUILD_TRAINER="${LLAMAFLEET_BUILD_TRAINER:-ON}" >/dev/null
cmake --build "$build_dir" -j"$jobs"
ctest --test-dir "$build_dir" --output-on-failure --timeout 900 -j"$jobs" "$@"
