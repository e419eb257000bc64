#!/usr/bin/env bash
# gpu_kit_test: tests/gpu/kit.sh makes a kit, and tests/gpu configures from it against this
# machine's LibTorch with the link lines a GPU machine would get: every llamafleet library
# the trainer links is a target tests/gpu defines (no bare -lllamafleet_* left to the
# linker), absl, protobuf, libcrypto, PCRE2 and utf8proc are linked from the kit, and no include
# folder outside the checkout, the kit and LibTorch's own holds absl, CLI11, nlohmann,
# protobuf, OpenSSL, PCRE2 or utf8proc headers. The build and the run themselves are tests/gpu/ci.sh's (CI).
set -euo pipefail
src="$(cd "$(dirname "$0")/../.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "gpu_kit_test: FAIL: $*" >&2; exit 1; }
bash "$src/tests/gpu/kit.sh" --out "$tmp/kit"
cmake -S "$src/tests/gpu" -B "$tmp/build" -DLLAMAFLEET_GPU_KIT="$tmp/kit" >"$tmp/configure.log" 2>&1 ||
  { tail -20 "$tmp/configure.log" >&2; fail "tests/gpu does not configure from the kit"; }
for t in sharded_rank trainer_gpu_bench; do
  link="$tmp/build/CMakeFiles/$t.dir/link.txt"
  [ -f "$link" ] || fail "no link line for $t ($link)"
  undefined=$(grep -oE -- '-lllamafleet[A-Za-z0-9_]*' "$link" | sort -u | tr '\n' ' ' || true)
  [ -z "$undefined" ] || fail "$t links libraries tests/gpu/CMakeLists.txt does not define: $undefined"
  for lib in libabsl libprotobuf libcrypto libpcre2-8 libutf8proc; do
    grep -q "$tmp/kit/lib/$lib.a" "$link" || fail "$t does not link the kit's $lib.a"
  done
  outside=$(tr ' ' '\n' <"$link" | grep -E 'lib(absl|protobuf|crypto|ssl|sentencepiece|pcre2|utf8proc)[^/]*\.(a|so)' | grep -v -e "^$tmp/kit/" -e '^-Wl,--exclude-libs,' || true)
  [ -z "$outside" ] || fail "$t links a system copy of what the kit holds: $outside"
done
while read -r dir; do
  case "$dir" in "$src"/* | "$tmp"/*) continue ;; esac
  for h in absl/base/config.h CLI/CLI.hpp nlohmann/json.hpp google/protobuf/message.h openssl/evp.h pcre2.h utf8proc.h; do
    [ ! -e "$dir/$h" ] || fail "the include folder $dir has $h: a system copy could be used instead of the kit's"
  done
done < <(grep -rh '^CXX_INCLUDES' "$tmp/build" --include=flags.make | tr ' ' '\n' | sed -n 's/^-I//p; /^\//p' | sort -u)
echo "gpu_kit_test: ok"
