#!/usr/bin/env bash
# Installs the Debian (bookworm) packages llamafleet needs; only those missing, so it is
# cheap to re-run. Used by tests/run.sh (everything) and deploy/local/demo.sh (--build-only).
#
#   deploy/local/install-deps.sh               # build, run, and every test and deploy tool
#   deploy/local/install-deps.sh --build-only  # only what building and running llamafleet
#                                              # needs: the toolchain, the coordinator, CLI,
#                                              # storage and trainer libraries
# Either way it creates the system user `llamafleet` that a root worker runs trainers as.
set -euo pipefail

mode=all
case "${1:-}" in
  "") ;;
  --build-only) mode=build ;;
  *) echo "usage: deploy/local/install-deps.sh [--build-only]" >&2; exit 2 ;;
esac

packages=(
  # toolchain
  cmake g++ make ccache pkg-config
  # coordinator, CLI, storage
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libssl-dev
  libboost-dev libboost-system-dev openssl
  libsqlite3-dev libspdlog-dev libfmt-dev libyaml-cpp-dev libcli11-dev
  libgoogle-perftools-dev  # tcmalloc_minimal for the coordinator
  # trainer (LibTorch 1.13 CPU, Gloo for c10d, SentencePiece; spm_train makes the demo's
  # tokenizer; PCRE2 for the BPE tokenizers' patterns) and python3 for the demo's data
  libtorch-dev libgloo-dev libsentencepiece-dev sentencepiece libpcre2-dev libutf8proc-dev nlohmann-json3-dev python3
)
if [ "$mode" = all ]; then
  packages+=(
    # tests; clang and its runtimes (libFuzzer, ASan, UBSan) for tests/fuzz
    libgtest-dev libgmock-dev clang libclang-rt-14-dev
    # the trainer's Python reference
    python3-torch python3-sentencepiece python3-numpy
    # the Python client (clients/python; its stubs come from protoc and grpc_python_plugin
    # of the build list), tqdm for its progress bar, and what its offline `pip install`
    # test builds with
    python3-grpcio python3-protobuf python3-tqdm python3-venv python3-pip python3-setuptools
    python3-wheel
    # portal browser test (playwright-core from npm drives Debian's chromium) and
    # `promtool check metrics` for /metrics
    nodejs chromium prometheus
    # deploy/: container images and the podman cluster test (rootful podman with runc;
    # netavark + aardvark-dns for networks with DNS, iptables for their NAT), the images'
    # Debian base (mmdebstrap), `systemd-analyze verify` for the units, and PyYAML for the
    # rendered Kubernetes manifests' checks
    podman runc netavark aardvark-dns iptables mmdebstrap systemd python3-yaml
  )
  # Debian ships npm as its own package; NodeSource's nodejs bundles it (and conflicts
  # with Debian's npm), so ask for npm only when there is none.
  command -v npm >/dev/null 2>&1 || packages+=(npm)
  # `kubectl kustomize` for deploy/k8s: Debian's kubernetes-client, unless a kubectl is
  # already installed (another package owning /usr/bin/kubectl conflicts with it).
  command -v kubectl >/dev/null 2>&1 || packages+=(kubernetes-client)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q
  $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# The unprivileged user a root llamafleet-worker runs trainers as (docs/security.md).
if ! id llamafleet >/dev/null 2>&1; then
  echo "install-deps: creating the system user llamafleet (trainers of a root worker run as it)" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo useradd --system --no-create-home --shell /usr/sbin/nologin llamafleet
fi
