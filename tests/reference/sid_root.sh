#!/usr/bin/env bash
# Makes (once) a Debian sid root holding the reference implementations users compare with
# — Hugging Face transformers and tokenizers, torch (CPU), tiktoken, jinja2, gguf,
# llama.cpp's tools — and runs a command in it with this checkout at /src. Only the
# scripts that make committed fixtures (tests/trainer/fixtures/*/make_*.py) use it; the test
# suites read the fixtures and never need this root.
#
#   tests/reference/sid_root.sh --root-only          # make or reuse it, print its path
#   tests/reference/sid_root.sh python3 tests/...    # run a command in it (cwd /src)
#
# Environment: LLAMAFLEET_CACHE (default ~/.cache/llamafleet), LLAMAFLEET_DEBIAN_MIRROR.
set -euo pipefail
cd "$(dirname "$0")/../.."
cache="${LLAMAFLEET_CACHE:-$HOME/.cache/llamafleet}/sid"
mirror="${LLAMAFLEET_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
packages=(python3-transformers python3-tokenizers python3-torch python3-tiktoken
  python3-jinja2 python3-safetensors python3-sentencepiece python3-gguf python3-numpy
  llama.cpp-tools ca-certificates)
root="$cache/root"
say() { echo "sid_root: $*" >&2; }
mkdir -p "$cache"
exec 9>"$cache/lock"
flock 9
if [ ! -e "$root/.llamafleet-packages" ]; then
  rm -rf --one-file-system "$root.partial"
  say "making the sid root $root with mmdebstrap (about 5 minutes, ~1.8 GB; log $cache/mmdebstrap.log)"
  mmdebstrap --variant=apt --mode=root --format=directory \
    --aptopt='Acquire::Check-Valid-Until "false"' --aptopt='Acquire::Retries "3"' \
    --include="$(IFS=,; echo "${packages[*]}")" sid "$root.partial" "$mirror" \
    </dev/null >"$cache/mmdebstrap.log" 2>&1 || { tail -20 "$cache/mmdebstrap.log" >&2; exit 1; }
  mkdir -p "$root.partial/src"
  chroot "$root.partial" dpkg-query -W -f='${Package}=${Version}\n' >"$root.partial/.llamafleet-packages"
  mv "$root.partial" "$root"
fi
flock -u 9
[ "${1:-}" = --root-only ] && { echo "$root"; exit 0; }
[ $# -gt 0 ] || { echo "usage: $0 --root-only | COMMAND..." >&2; exit 2; }
# The checkout is bind-mounted at /src in a private mount namespace, so nothing outlives
# the command.
exec unshare --mount --propagation private sh -c '
  mount --bind "$1" "$2/src" && mount -t proc proc "$2/proc" && shift 2 &&
  exec chroot "$0" sh -c "cd /src && exec \"\$@\"" sh "$@"' "$root" "$PWD" "$root" "$@"
