#!/usr/bin/env bash
# Builds llamafleet against Debian trixie's CUDA LibTorch 2.6 and NCCL 2.22, in a trixie
# root made with mmdebstrap, on a machine without a GPU. The root is cached and reused while
# the package versions it was made from are still the mirror's; the build goes to
# build-cuda/ of this checkout (binaries in build-cuda/bin), its objects to a ccache in the
# same cache. Runs as root (mmdebstrap --mode=root, chroot). Safe to re-run and to Ctrl-C.
#
#   tests/cuda/build.sh                 # make or reuse the root, build
#   tests/cuda/build.sh --test [ARGS]   # ... then ctest in the root (ARGS go to ctest)
#   tests/cuda/build.sh --root-only     # make or reuse the root, print its path
#   tests/cuda/build.sh --run CMD...    # run CMD in the root (the checkout is /src, cwd)
#   tests/cuda/build.sh --shell         # an interactive shell in the root
#
# Environment:
#   LLAMAFLEET_CUDA_CACHE     cache root (default ${XDG_CACHE_HOME:-~/.cache}/llamafleet/cuda):
#                             root-<key>/ (the trixie root), apt/ (package indices used for
#                             the key), ccache/ (this build's compiler cache)
#   LLAMAFLEET_DEBIAN_MIRROR  (default http://deb.debian.org/debian)
#   LLAMAFLEET_DEBIAN_SECURITY_MIRROR (default http://deb.debian.org/debian-security)
#   LLAMAFLEET_CUDNN_DIR      where libcudnn.so.9 is taken from (default /usr/local/cuda/lib64)
#   LLAMAFLEET_CUDA_TARGETS   "all" (default) or "trainer": only the trainer, the worker and
#                             the CLI, and the tests of the trainer (see docs/cuda.md)
#   JOBS                      build and ctest parallelism (default: number of cores)
#
# What the root holds and why each choice was made is in docs/cuda.md.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
src="$(cd "$here/../.." && pwd)"
say() { echo "cuda/build.sh: $*" >&2; }
die() { say "$*"; exit 1; }

mode=build
ctest_args=()
run_cmd=()
case "${1:-}" in
  "") ;;
  --test) mode=test; shift; ctest_args=("$@") ;;
  --root-only) mode=root ;;
  --run) mode=run; shift; run_cmd=("$@"); ((${#run_cmd[@]})) || die "--run: no command" ;;
  --shell) mode=shell ;;
  -h | --help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 0 ;;
  *) die "unknown argument '$1' (see --help)" ;;
esac

[ "$(id -u)" -eq 0 ] || die "must run as root (mmdebstrap --mode=root and chroot)"
for tool in mmdebstrap apt-get dpkg-deb unshare chroot flock sha256sum; do
  command -v "$tool" >/dev/null || die "$tool is not installed (deploy/local/install-deps.sh installs mmdebstrap)"
done

cache="${LLAMAFLEET_CUDA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/llamafleet/cuda}"
mirror="${LLAMAFLEET_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
security_mirror="${LLAMAFLEET_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}"
cudnn_dir="${LLAMAFLEET_CUDNN_DIR:-/usr/local/cuda/lib64}"
targets="${LLAMAFLEET_CUDA_TARGETS:-all}"
jobs="${JOBS:-$(nproc)}"
case "$targets" in all | trainer) ;; *) die "LLAMAFLEET_CUDA_TARGETS: all or trainer, not '$targets'" ;; esac
mkdir -p "$cache"

# --- the recipe: every input of the root, hashed into its key ------------------------------
suite=trixie
components=main,contrib,non-free
packages=(
  # toolchain. nvcc is needed although nothing here is CUDA source: LibTorch's CMake
  # package enables the CUDA language. CUDA 12.4's nvcc accepts g++ <= 13 as its host
  # compiler (nvidia-cuda-toolkit-gcc points it there); the project itself is built by g++ 14.
  g++ make cmake ccache pkg-config nvidia-cuda-toolkit nvidia-cuda-toolkit-gcc
  # coordinator, CLI, storage (the same set as deploy/local/install-deps.sh --build-only)
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libssl-dev openssl
  libboost-dev libboost-system-dev libsqlite3-dev libspdlog-dev libfmt-dev libyaml-cpp-dev
  libcli11-dev libgoogle-perftools-dev
  # trainer: CUDA LibTorch, NCCL, the CUDA build of Gloo (libgloo-dev would remove the CUDA
  # LibTorch), SentencePiece, PCRE2 and utf8proc (the BPE tokenizers)
  libtorch-cuda-dev libnccl-dev libgloo-cuda-dev libsentencepiece-dev sentencepiece
  libpcre2-dev libutf8proc-dev nlohmann-json3-dev
  # tests: GoogleTest, the trainer's Python reference on the same torch 2.6
  libgtest-dev libgmock-dev python3 python3-torch-cuda python3-sentencepiece python3-numpy
  python3-yaml procps
)
# Nothing here needs documentation or the CUDA libraries' static archives (2.6 GB of the
# 2.6 GB nvidia-cuda-dev; NCCL's is 246 MB). nvcc links its own test program against
# cudart_static, so that one archive stays.
dpkg_opts=(
  'path-exclude=/usr/share/doc/*' 'path-include=/usr/share/doc/*/copyright'
  'path-exclude=/usr/share/man/*' 'path-exclude=/usr/share/info/*' 'path-exclude=/usr/share/locale/*'
  'path-exclude=/usr/lib/x86_64-linux-gnu/lib*_static*.a'
  'path-include=/usr/lib/x86_64-linux-gnu/libcudart_static.a'
)
# Debian's nvidia-cudnn is an installer whose postinst downloads cuDNN from NVIDIA. In its
# place: a package of the same name (and a later version) carrying the cuDNN 9 loader
# library of this machine image, which is what LibTorch links (libcudnn.so.9); cuDNN's
# engine libraries are dlopen()ed on the first cuDNN call on a GPU, never here.
standin_version=9.0.0.312~cuda12+llamafleet1
[ -e "$cudnn_dir/libcudnn.so.9" ] ||
  die "no libcudnn.so.9 in $cudnn_dir (cuDNN 9): set LLAMAFLEET_CUDNN_DIR to a folder that has it"
cudnn_sha=$(sha256sum "$(readlink -f "$cudnn_dir/libcudnn.so.9")" | cut -c1-16)
recipe="$suite $components
${packages[*]}
${dpkg_opts[*]}
nvidia-cudnn $standin_version cudnn $cudnn_sha
root-setup 1"

apt_dir="$cache/apt"
apt_opts=(
  -o "Dir::Etc::SourceList=$apt_dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
  -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::State::status=$apt_dir/status"
  -o "Dir::Cache=$apt_dir/cache" -o Dir::Etc::Preferences=/dev/null
  -o Dir::Etc::PreferencesParts=/dev/null -o APT::Architecture=amd64 -o Debug::NoLocking=1
  -o APT::Sandbox::User=root -o Acquire::Retries=2 -o Acquire::http::Timeout=30
)
sources="deb $mirror $suite ${components//,/ }
deb $mirror $suite-updates ${components//,/ }
deb $security_mirror $suite-security ${components//,/ }"

# resolve_key: sets key to that of the root the recipe makes from the mirror's packages now
# (a hash of every package version the install resolves to), or to "" when the mirror
# cannot be read.
resolve_key() {
  exec 8>"$cache/apt.lock"  # one apt-get at a time on CACHE/apt
  flock 8
  resolve_key_unlocked
  exec 8>&-
}
resolve_key_unlocked() {
  key=""
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
  : >"$apt_dir/status"
  printf '%s\n' "$sources" | sed 's|^deb |deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] |' \
    >"$apt_dir/sources.list"
  apt-get "${apt_opts[@]}" -qq update >"$apt_dir/update.log" 2>&1 || return 0
  ! grep -q '^[WE]:' "$apt_dir/update.log" || return 0
  local closure
  closure=$(apt-get "${apt_opts[@]}" -s install --no-install-recommends "${packages[@]}" 2>"$apt_dir/resolve.log" |
    awk '/^Inst / && $2 != "nvidia-cudnn" {print $2, $3}' | sort)
  [ -n "$closure" ] || { cat "$apt_dir/resolve.log" >&2; die "the package set does not resolve on $suite"; }
  key=$(printf '%s\n%s\n' "$recipe" "$closure" | sha256sum | cut -c1-16)
}

# make_root KEY: makes $cache/root-KEY with mmdebstrap (directory format), atomically.
# (Roots are removed with rm --one-file-system: if an interrupted mmdebstrap left /dev or
# /proc mounted inside one, rm must not descend into the host's.)
make_root() {
  local key="$1" final="$cache/root-$1" partial="$cache/root-$1.partial"
  local log="$cache/mmdebstrap-$key.log" work="$cache/standin"
  rm -rf --one-file-system "$partial" "$work"
  mkdir -p "$work/pkg/DEBIAN" "$work/pkg/usr/lib/x86_64-linux-gnu"
  cp -L "$cudnn_dir/libcudnn.so.9" "$work/pkg/usr/lib/x86_64-linux-gnu/libcudnn.so.9"
  cat >"$work/pkg/DEBIAN/control" <<EOF
Package: nvidia-cudnn
Version: $standin_version
Architecture: amd64
Maintainer: llamafleet tests/cuda/build.sh <root@localhost>
Provides: libcudnn.so.9
Description: stand-in for Debian's cuDNN downloader (tests/cuda/build.sh)
 Carries libcudnn.so.9 (cuDNN 9's loader library) from the build machine instead of
 downloading cuDNN from NVIDIA in its postinst.
EOF
  dpkg-deb --root-owner-group -Zgzip --build "$work/pkg" "$work/nvidia-cudnn.deb" >/dev/null
  local opt dpkg_args=() mirrors=()
  for opt in "${dpkg_opts[@]}"; do dpkg_args+=("--dpkgopt=$opt"); done
  while read -r line; do mirrors+=("$line"); done <<<"$sources"
  say "making the trixie root $final with mmdebstrap (about 8 minutes: ~2.9 GB of packages; log $log)"
  local started=$SECONDS
  # The stand-in is installed with the essential packages, before apt resolves the rest.
  mmdebstrap --variant=apt --mode=root --format=directory --components="$components" \
    --aptopt='Acquire::Retries "3"' "${dpkg_args[@]}" \
    --essential-hook="cp '$work/nvidia-cudnn.deb' \"\$1/tmp/\" && chroot \"\$1\" dpkg -i /tmp/nvidia-cudnn.deb && rm \"\$1/tmp/nvidia-cudnn.deb\"" \
    --include="$(IFS=,; echo "${packages[*]}")" \
    "$suite" "$partial" "${mirrors[@]}" </dev/null >"$log" 2>&1 &
  local pid=$!
  trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf --one-file-system "$partial"; exit 130' INT TERM
  while kill -0 "$pid" 2>/dev/null; do
    sleep 30
    kill -0 "$pid" 2>/dev/null || break
    say "  ... $((SECONDS - started)) s, $(du -sxh "$partial" 2>/dev/null | cut -f1) so far"
  done
  if ! wait "$pid"; then
    trap - INT TERM
    tail -25 "$log" >&2
    rm -rf --one-file-system "$partial"
    die "mmdebstrap failed (log $log)"
  fi
  trap - INT TERM
  # What the tests expect of a machine: localhost, and the user a root worker runs
  # trainers as (deploy/local/install-deps.sh makes the same one).
  grep -qs localhost "$partial/etc/hosts" || printf '127.0.0.1 localhost\n::1 localhost ip6-localhost\n' >"$partial/etc/hosts"
  chroot "$partial" sh -c 'id llamafleet >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin llamafleet'
  mkdir -p "$partial/src"
  chroot "$partial" dpkg-query -W -f='${Package}=${Version}\n' >"$partial/.llamafleet-packages"
  printf '%s\n' "$recipe" >"$partial/.llamafleet-recipe"
  mv "$partial" "$final"
  say "root ready in $((SECONDS - started)) s: $(du -sh "$final" | cut -f1) ($final)"
}

# Runs hold the cache's lock shared while they use a root; making (and so removing) one
# takes it exclusively, waiting for the runs that use the others.
exec 9>"$cache/lock"
flock -s 9

t0=$SECONDS
say "resolving trixie's package versions (mirror $mirror)"
resolve_key
if [ -n "$key" ]; then
  root="$cache/root-$key"
  if [ ! -d "$root" ]; then
    # (Shared is given up first: two runs upgrading at once would wait on each other.)
    flock -u 9
    flock -n 9 || { say "waiting for the other runs on $cache to end (a new root replaces theirs)"; flock 9; }
  fi
  if [ ! -d "$root" ]; then
    make_root "$key"
    # Older roots (other package versions) go: each is several GB.
    for old in "$cache"/root-*; do
      [ "$old" = "$root" ] || { say "removing the outdated root $old"; rm -rf --one-file-system "$old"; }
    done
  else
    say "reusing $root (same package versions)"
  fi
else
  root=$(ls -dt "$cache"/root-* 2>/dev/null | grep -v '\.partial$' | head -1 || true)
  [ -n "$root" ] || { tail -5 "$apt_dir/update.log" >&2 2>/dev/null || true; die "cannot read the mirror $mirror and no root is cached"; }
  say "cannot read the mirror (log $apt_dir/update.log): reusing the newest cached root $root"
fi
t_root=$((SECONDS - t0))
flock -s 9
if [ "$mode" = root ]; then echo "$root"; exit 0; fi

# in_root CMD...: CMD in the root, in a private mount namespace (its mounts vanish with it,
# whatever way it ends), with this checkout at /src and the ccache at /ccache.
mkdir -p "$cache/ccache"
in_root() {
  unshare --mount --propagation private -- /bin/sh -c '
    set -e
    r=$1 s=$2 c=$3; shift 3
    mount --rbind /dev "$r/dev"
    mount -t proc proc "$r/proc"
    mount --rbind /sys "$r/sys"
    mkdir -p "$r/ccache"
    mount --bind "$s" "$r/src"
    mount --bind "$c" "$r/ccache"
    exec chroot "$r" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM="${TERM:-dumb}" CI="${CI:-}" \
      PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      CCACHE_DIR=/ccache CCACHE_BASEDIR=/src CCACHE_NOHASHDIR=1 CCACHE_MAXSIZE=4G \
      /bin/sh -c "cd /src && exec \"\$@\"" sh "$@"' sh "$root" "$src" "$cache/ccache" "$@" 9>&-
}

case "$mode" in
  shell) in_root bash -i; exit $? ;;
  run) in_root "${run_cmd[@]}"; exit $? ;;
esac

# --- the build ------------------------------------------------------------------------------
build_targets=()
if [ "$targets" = trainer ]; then
  # The trainer, the sharding engine's driver and benchmark, and the trainer's test programs
  # (tests/trainer/CMakeLists.txt).
  build_targets=(--target llamafleet-trainer-checks)
fi
say "configuring and building in $root (build-cuda/, $jobs jobs)"
t1=$SECONDS
mkdir -p "$src/build-cuda"
in_root sh -c 'cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLLAMAFLEET_BUILD_TESTS=ON \
    -DLLAMAFLEET_WERROR_TRAINER=ON >build-cuda/configure.log 2>&1 ||
    { tail -30 build-cuda/configure.log >&2; exit 1; }
  grep -E "llamafleet: (CUDA|NCCL)|PyTorch: CUDA detected" build-cuda/configure.log >&2 || true' ||
  die "cmake failed to configure (build-cuda/configure.log)"
# Both must come from what CMake found: without them the GPU code is not compiled at all.
for def in LLAMAFLEET_HAVE_CUDA LLAMAFLEET_HAVE_NCCL; do
  grep -rqs -- "-D$def=1" "$src/build-cuda/worker/trainer/CMakeFiles/llamafleet_trainer.dir/flags.make" ||
    die "CMake did not enable $def (build-cuda/configure.log)"
done
# (-k: every error of the run, not only the first.)
in_root cmake --build build-cuda -j"$jobs" "${build_targets[@]}" -- -k || die "the build failed"
t_build=$((SECONDS - t1))

# What this build is for: the trainer linked to CUDA LibTorch and NCCL.
links=$(in_root ldd build-cuda/bin/llamafleet-train)
for lib in libtorch_cuda libnccl; do
  grep -q "$lib" <<<"$links" || die "build-cuda/bin/llamafleet-train does not link $lib"
done
in_root ccache -s 2>/dev/null | grep -iE 'hits|misses' | sed 's/^/cuda\/build.sh: ccache: /' >&2 || true
say "built: llamafleet-train links $(grep -oE 'lib(torch_cuda|nccl)\.so[.0-9]*' <<<"$links" | sort -u | tr '\n' ' ')"
say "times: root $t_root s, build $t_build s"
[ "$mode" = test ] || exit 0

# tests/gpu/run.sh's project (the trainer without gRPC or SQLite) must configure against a
# CUDA LibTorch with the same options: a CMake error there would cost a lent GPU its time.
say "configuring tests/gpu (what tests/gpu/run.sh builds on a GPU machine) in build-cuda/gpu"
in_root sh -c 'cmake -S tests/gpu -B build-cuda/gpu -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DLLAMAFLEET_WERROR_TRAINER=ON >build-cuda/gpu-configure.log 2>&1 ||
    { tail -30 build-cuda/gpu-configure.log >&2; exit 1; }' ||
  die "tests/gpu does not configure (build-cuda/gpu-configure.log)"
grep -qs -- "-DLLAMAFLEET_HAVE_NCCL=1" "$src/build-cuda/gpu/trainer/CMakeFiles/llamafleet_trainer.dir/flags.make" ||
  die "tests/gpu configured without NCCL (build-cuda/gpu-configure.log)"

# --- the tests ------------------------------------------------------------------------------
# Left to tests/run.sh (they test no trainer code, and need what this root does not have):
#   portal_browser_test           Chromium and Node
#   deploy_podman_cluster_test    podman (images of the bookworm build)
#   deploy_kustomize_test         kubectl
#   deploy_systemd_test           systemd-analyze
exclude='^(portal_browser_test|deploy_podman_cluster_test|deploy_kustomize_test|deploy_systemd_test)$'
if [ "$targets" = trainer ]; then
  exclude=''
  ctest_args=(-L '^trainer$' "${ctest_args[@]}")  # the tests of tests/trainer
fi
t2=$SECONDS
say "ctest in the root (LibTorch 2.6 $(grep -o '^libtorch-cuda-dev=[^ ]*' "$root/.llamafleet-packages" | cut -d= -f2))"
status=0
in_root ctest --test-dir build-cuda --output-on-failure --timeout 900 -j"$jobs" \
  ${exclude:+-E "$exclude"} "${ctest_args[@]}" || status=$?
say "times: root $t_root s, build $t_build s, tests $((SECONDS - t2)) s"
exit "$status"
