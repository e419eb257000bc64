#!/usr/bin/env bash
# Packs the C++ libraries tests/gpu needs beyond a C++ compiler, CMake and a CUDA PyTorch
# into one folder (default tests/gpu/kit/, ignored by git) that travels to a GPU machine
# with the working tree. Everything in it comes from this machine's Debian packages:
#
#   libabsl-dev         headers; its static archives, merged into lib/libabsl.a
#   libprotobuf-dev     headers; lib/libprotobuf.a (the trainer's TensorBoard events)
#   protobuf-compiler   not packed: generates gen/tensorboard/event.pb.{h,cc} with the
#                       protoc of the same version as those headers
#   libssl-dev          OpenSSL headers; lib/libcrypto.a (SHA-256)
#   libpcre2-dev        pcre2.h; lib/libpcre2-8.a (the BPE tokenizers' regular expressions)
#   libutf8proc-dev     utf8proc.h; lib/libutf8proc.a (the BPE tokenizers' Unicode normalizers)
#   libcli11-dev, nlohmann-json3-dev   headers only
#
# SentencePiece is not packed: the trainer reaches it through a dlopen()ed module
# (worker/trainer/tokenizer.h), which the GPU build leaves out; what tests/gpu runs never
# tokenizes text. Archives are stripped of debug information and must be position
# independent (no R_X86_64_32/32S relocations), so they link into PIE executables. Debian
# builds them with the C++11 std::string ABI, which pip's torch >= 2.7 uses too
# (tests/gpu/run.sh checks). tests/gpu/kit.cmake turns the folder into CMake targets.
#
#   tests/gpu/kit.sh [--out DIR] [--max-mib N]     # prints the kit's size; N default 48
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
src="$(cd "$here/../.." && pwd)"
out="$here/kit"
max_mib=48
while (($#)); do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --max-mib) max_mib="$2"; shift 2 ;;
    -h | --help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "kit.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
die() { echo "kit.sh: $*" >&2; exit 1; }

packages=(libabsl-dev libprotobuf-dev protobuf-compiler libssl-dev libpcre2-dev libutf8proc-dev libcli11-dev
  nlohmann-json3-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
((${#missing[@]} == 0)) || die "missing Debian packages: ${missing[*]} (apt-get install ${missing[*]})"
for tool in objcopy readelf ar; do command -v "$tool" >/dev/null || die "$tool not found (binutils)"; done
version() { dpkg-query -W -f='${Version}' "$1"; }
[ "$(version libprotobuf-dev)" = "$(version protobuf-compiler)" ] ||
  die "protobuf-compiler $(version protobuf-compiler) differs from libprotobuf-dev $(version libprotobuf-dev)"

partial="$out.partial"
rm -rf "$partial"
mkdir -p "$partial/include" "$partial/lib" "$partial/gen"
trap 'rm -rf "$partial"' EXIT

# Headers keep their path below /usr/include (the multiarch folder's, e.g. OpenSSL's
# configuration.h, merged in).
for p in libabsl-dev libprotobuf-dev libssl-dev libpcre2-dev libutf8proc-dev libcli11-dev nlohmann-json3-dev; do
  dpkg -L "$p" | while read -r f; do
    [ -f "$f" ] || continue
    case "$f" in
      /usr/include/x86_64-linux-gnu/*) rel="${f#/usr/include/x86_64-linux-gnu/}" ;;
      /usr/include/*) rel="${f#/usr/include/}" ;;
      *) continue ;;
    esac
    mkdir -p "$partial/include/$(dirname "$rel")"
    cp "$f" "$partial/include/$rel"
  done
done

# pic_check ARCHIVE: fails on relocations a position-independent executable cannot take.
pic_check() {
  local n
  n=$(readelf -r "$1" 2>/dev/null | grep -cE 'R_X86_64_(32|32S) ' || true)
  [ "$n" = 0 ] || die "$1 has $n absolute 32-bit relocations: not built with -fPIC"
}
absl_archives=()
while read -r f; do
  case "$f" in */libabsl_*.a) absl_archives+=("$f") ;; esac
done < <(dpkg -L libabsl-dev)
((${#absl_archives[@]})) || die "libabsl-dev has no static archives"
# One archive for all of absl: the linker resolves its members' references to each other
# in any order.
{
  echo "CREATE $partial/lib/libabsl.a"
  for a in "${absl_archives[@]}"; do pic_check "$a"; echo "ADDLIB $a"; done
  echo SAVE
  echo END
} | ar -M
for lib in libprotobuf.a libcrypto.a libpcre2-8.a libutf8proc.a; do
  f="/usr/lib/x86_64-linux-gnu/$lib"
  [ -f "$f" ] || die "no $f"
  pic_check "$f"
  cp "$f" "$partial/lib/$lib"
done
for a in "$partial"/lib/*.a; do objcopy --strip-debug "$a"; done

protoc --cpp_out="$partial/gen" -I "$src/api" "$src/api/tensorboard/event.proto"

{
  echo "# tests/gpu/kit.sh, $(date -u +%Y-%m-%dT%H:%M:%SZ), $(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "compiler $(c++ -dumpfullversion 2>/dev/null || echo unknown), cxx11 abi 1"
  for p in "${packages[@]}"; do echo "package $p $(version "$p")"; done
  for a in "$partial"/lib/*.a; do echo "archive $(basename "$a") $(stat -c %s "$a")"; done
} >"$partial/MANIFEST"

bytes=$(du -sb "$partial" | cut -f1)
mib=$(((bytes + 1048575) / 1048576))
((mib <= max_mib)) || die "the kit is $mib MiB, over --max-mib $max_mib (what travels to a GPU machine is bounded)"
rm -rf "$out"
mv "$partial" "$out"
trap - EXIT
echo "kit.sh: $out: $mib MiB ($bytes bytes): $(ls "$out/lib" | tr '\n' ' ')"
