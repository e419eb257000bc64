#!/usr/bin/env bash
# Builds the llamafleet container images on this machine, offline from any registry:
#   localhost/llamafleet-base:bookworm     Debian bookworm minbase (mmdebstrap), imported
#   localhost/llamafleet-coordinator:TAG   coordinator + CLI + health probe
#   localhost/llamafleet-worker:TAG        CPU worker + trainer (LibTorch CPU, Gloo)
# and with --cuda, instead:
#   localhost/llamafleet-base:trixie-cuda  Debian trixie minbase + libfabric1, ibverbs-providers
#   localhost/llamafleet-worker-cuda:TAG   worker + CUDA trainer (LibTorch 2.6 CUDA, NCCL)
# The binaries are the ones already built in the build directory; their shared libraries
# that the base lacks (the ldd closure) are staged next to them. Nothing is compiled in an
# image. --cuda takes build-cuda/ (made by tests/cuda/build.sh) and stages from inside that
# build's trixie root, so the libraries are the ones the binaries were linked against.
# --stage-only stages the worker's files in DIR for a base of your own.
#
#   deploy/containers/build.sh [--build-dir DIR] [--tag TAG] [--only coordinator|worker]
#                              [--cuda] [--rebuild-base] [--stage-only DIR]
#
# Environment: LLAMAFLEET_BUILD_DIR (default build), LLAMAFLEET_IMAGE_TAG (default latest),
# LLAMAFLEET_IMAGE_CACHE (base tarball cache, default ~/.cache/llamafleet/images),
# LLAMAFLEET_DEBIAN_MIRROR (default http://deb.debian.org/debian).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../.."
root=$PWD

build_dir="${LLAMAFLEET_BUILD_DIR:-build}"
tag="${LLAMAFLEET_IMAGE_TAG:-latest}"
only=""
rebuild_base=0
stage_only=""
cuda=0
stage_cuda=""   # (internal) --stage-cuda DIR SONAMES: staging inside the CUDA build's root
stage_cuda_sonames=""
build_dir_set=0
usage() { sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build_dir="$2"; build_dir_set=1; shift ;;
    --cuda) cuda=1 ;;
    --stage-cuda) stage_cuda="$2"; stage_cuda_sonames="$3"; shift 2 ;;
    --tag) tag="$2"; shift ;;
    --only) only="$2"; shift
      case "$only" in coordinator | worker) ;; *) echo "build.sh: --only: coordinator or worker, not '$only'" >&2; exit 2 ;; esac ;;
    --rebuild-base) rebuild_base=1 ;;
    --stage-only) stage_only="$2"; shift ;;
    -h | --help) usage ;;
    *) echo "build.sh: unknown argument '$1'" >&2; usage ;;
  esac
  shift
done
((cuda == 0 || build_dir_set)) || build_dir=build-cuda
((cuda == 0)) || [ -z "$only$stage_only" ] || { echo "build.sh: --cuda builds the CUDA worker only (no --only, --stage-only)" >&2; exit 2; }
case "$tag" in *[!A-Za-z0-9_.-]* | "" | [.-]*) echo "build.sh: --tag: letters, digits, '_', '.', '-' only" >&2; exit 2 ;; esac
cache="${LLAMAFLEET_IMAGE_CACHE:-$HOME/.cache/llamafleet/images}"
mirror="${LLAMAFLEET_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
base_image=localhost/llamafleet-base:bookworm
case "$build_dir" in /*) ;; *) build_dir="$root/$build_dir" ;; esac
bin="$build_dir/bin"
say() { echo "build.sh: $*" >&2; }

# What each image carries from the build (the CLI goes everywhere: handy in `podman exec`).
coordinator_bins=(llamafleet-coordinator llamafleet llamafleet-health-probe)
worker_bins=(llamafleet-worker llamafleet-train llamafleet)
worker_modules=(libllamafleet_spm.so)  # dlopen()ed from the executables' directory
need=()
wanted=("${coordinator_bins[@]}" "${worker_bins[@]}" "${worker_modules[@]}")
((cuda == 0)) && [ -z "$stage_cuda" ] || wanted=("${worker_bins[@]}" "${worker_modules[@]}")
for b in "${wanted[@]}"; do
  [ -e "$bin/$b" ] || need+=("$b")
done
if ((${#need[@]})); then
  say "missing in $bin: ${need[*]}"
  if ((cuda)); then
    say "build them first: tests/cuda/build.sh"
  else
    say "build them first: cmake --build $build_dir --target llamafleet-coordinator llamafleet-worker llamafleet-train llamafleet llamafleet-health-probe"
  fi
  exit 1
fi
# Never staged: the NVIDIA driver's user-space libraries. The container toolkit mounts the
# host's, which must match its kernel module; a copy in the image would shadow them.
never_stage='^(libcuda\.so|libnvidia-|libnvcuvid\.so)'

if [ -z "$stage_only$stage_cuda" ]; then
  command -v podman >/dev/null || { say "podman is not installed (deploy/local/install-deps.sh installs it)"; exit 1; }
  # shellcheck source=podman-env.sh
  . "$here/podman-env.sh"
fi

# --- the base image: Debian's own packages, no registry ---------------------------------
base_sonames=""
if [ -z "$stage_only$stage_cuda" ] && ((cuda == 0)); then
  if ((rebuild_base)) || ! podman image exists "$base_image"; then
    tarball="$cache/bookworm-minbase.tar"
    if ((rebuild_base)) || [ ! -s "$tarball" ]; then
      command -v mmdebstrap >/dev/null || { say "mmdebstrap is not installed (deploy/local/install-deps.sh installs it)"; exit 1; }
      mkdir -p "$cache"
      say "making the Debian bookworm base with mmdebstrap (about 2 minutes; cached in $tarball)"
      mode=root
      [ "$(id -u)" -eq 0 ] || mode=unshare
      # minbase: dpkg, apt, coreutils, util-linux (setpriv), passwd (useradd), bash. Docs,
      # manuals and locales are left out.
      partial="$cache/bookworm-minbase.partial.tar"
      rm -rf "$partial"
      mmdebstrap --variant=minbase --mode="$mode" --format=tar --components=main \
        --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        --dpkgopt='path-exclude=/usr/share/info/*' \
        bookworm "$partial" "$mirror" </dev/null >"$cache/mmdebstrap.log" 2>&1 ||
        { tail -20 "$cache/mmdebstrap.log" >&2; rm -rf "$partial"; say "mmdebstrap failed (log $cache/mmdebstrap.log)"; exit 1; }
      mv "$partial" "$tarball"
    fi
    say "importing $tarball as $base_image"
    previous_base=$(podman image inspect --format '{{.Id}}' "$base_image" 2>/dev/null || true)
    podman import --change 'CMD ["/bin/bash"]' --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      "$tarball" "$base_image" >/dev/null
    # A replaced base is untagged now; images built on it keep their layers.
    [ -z "$previous_base" ] || podman rmi "$previous_base" >/dev/null 2>&1 || true
  fi
  # Libraries the base already provides, by soname: those are not copied.
  base_sonames=$(podman run --rm "${podman_runtime_opts[@]}" "${podman_ulimit_opts[@]}" --network none \
    "$base_image" /sbin/ldconfig -p | awk 'NR > 1 {print $1}' | sort -u)
else
  # A CUDA image's base has its own C and C++ runtimes; copy everything but the C library.
  base_sonames=$(printf '%s\n' linux-vdso.so.1 libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1 \
    libresolv.so.2 libutil.so.1 ld-linux-x86-64.so.2)
fi

# --- staging: binaries plus the libraries the base lacks ---------------------------------
# stage ROLE DIR BINARIES... [-- MODULES...]
stage() {
  local dir="$1"; shift
  local files=() modules=() in_modules=0
  for a in "$@"; do
    if [ "$a" = -- ]; then in_modules=1; continue; fi
    if ((in_modules)); then modules+=("$a"); else files+=("$a"); fi
  done
  rm -rf "$dir"
  mkdir -p "$dir/rootfs/opt/llamafleet/bin" "$dir/rootfs/opt/llamafleet/lib"
  cp -r "$here/common" "$dir/common"
  local f
  for f in "${files[@]}" "${modules[@]}"; do
    cp -L "$bin/$f" "$dir/rootfs/opt/llamafleet/bin/$f"
  done
  # ldd lists the whole closure (transitive); each library is copied under the name the
  # loader asks for, resolved through symlinks and Debian's alternatives.
  local line name path missing=0
  while read -r line; do
    case "$line" in
      *"=> not found"*) say "unresolved: $line"; missing=1; continue ;;
      *"=> /"*) name="${line%% =>*}"; path="${line#*=> }"; path="${path%% (*}" ;;
      *) continue ;;
    esac
    name="${name//[[:space:]]/}"
    grep -qxF "$name" <<<"$base_sonames" && continue
    [[ "$name" =~ $never_stage ]] && continue
    [ -e "$dir/rootfs/opt/llamafleet/lib/$name" ] || cp -L "$path" "$dir/rootfs/opt/llamafleet/lib/$name"
  done < <(for f in "${files[@]}" "${modules[@]}"; do
    # A statically linked binary (the `llamafleet` front) has no libraries, and ldd exits 1
    # on it: under set -e that would end this list before the files after it.
    ldd "$bin/$f" 2>/dev/null || true
  done)
  ((missing == 0)) || { say "some libraries are not found on this machine"; exit 1; }
  if [ -z "$stage_only" ]; then  # image layers need no debug info; the build keeps it
    strip --strip-debug "$dir"/rootfs/opt/llamafleet/bin/* 2>/dev/null || true
  fi
}

version=$(sed -n 's/^project(llamafleet VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
revision=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)

# --- the CUDA worker ------------------------------------------------------------------------
if [ -n "$stage_cuda" ]; then  # inside the CUDA build's trixie root (called by --cuda below)
  base_sonames=$(cat "$stage_cuda_sonames")
  stage "$stage_cuda" "${worker_bins[@]}" -- "${worker_modules[@]}"
  exit 0
fi
if ((cuda)); then
  case "$build_dir" in
    "$root"/*) ;;
    *) say "--cuda: the build directory must be inside this checkout (its root sees the checkout at /src)"; exit 1 ;;
  esac
  cuda_base=localhost/llamafleet-base:trixie-cuda
  if ((rebuild_base)) || ! podman image exists "$cuda_base"; then
    tarball="$cache/trixie-cuda-base.tar"
    if ((rebuild_base)) || [ ! -s "$tarball" ]; then
      command -v mmdebstrap >/dev/null || { say "mmdebstrap is not installed (deploy/local/install-deps.sh installs it)"; exit 1; }
      mkdir -p "$cache"
      say "making the Debian trixie base with mmdebstrap (about 2 minutes; cached in $tarball)"
      security_mirror="${LLAMAFLEET_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}"
      # minbase, plus what NCCL's EFA path needs from Debian: libfabric (its efa provider)
      # and rdma-core's verbs providers (libefa). No driver, no CUDA: those come staged or
      # from the host.
      partial="$cache/trixie-cuda-base.partial.tar"
      rm -rf "$partial"
      mmdebstrap --variant=minbase --mode=root --format=tar --components=main \
        --include=libfabric1,ibverbs-providers \
        --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        --dpkgopt='path-exclude=/usr/share/info/*' \
        trixie "$partial" "deb $mirror trixie main" "deb $mirror trixie-updates main" \
        "deb $security_mirror trixie-security main" </dev/null >"$cache/mmdebstrap-trixie.log" 2>&1 ||
        { tail -20 "$cache/mmdebstrap-trixie.log" >&2; rm -rf "$partial"; say "mmdebstrap failed (log $cache/mmdebstrap-trixie.log)"; exit 1; }
      mv "$partial" "$tarball"
    fi
    say "importing $tarball as $cuda_base"
    previous_base=$(podman image inspect --format '{{.Id}}' "$cuda_base" 2>/dev/null || true)
    podman import --change 'CMD ["/bin/bash"]' --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      "$tarball" "$cuda_base" >/dev/null
    [ -z "$previous_base" ] || podman rmi "$previous_base" >/dev/null 2>&1 || true
  fi
  work="$build_dir/images"
  ctx="$work/worker-cuda"
  mkdir -p "$work"
  podman run --rm "${podman_runtime_opts[@]}" "${podman_ulimit_opts[@]}" --network none \
    "$cuda_base" /sbin/ldconfig -p | awk 'NR > 1 {print $1}' | sort -u >"$work/worker-cuda.base-sonames"
  rel="${build_dir#"$root"/}"
  say "staging worker-cuda in $ctx, inside the trixie root build-cuda was built in"
  bash tests/cuda/build.sh --run bash deploy/containers/build.sh --build-dir "$rel" \
    --stage-cuda "$rel/images/worker-cuda" "$rel/images/worker-cuda.base-sonames"
  cp "$here/Containerfile.worker-cuda" "$ctx/Containerfile"
  image="localhost/llamafleet-worker-cuda:$tag"
  previous=$(podman image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)
  say "building $image ($(du -sh "$ctx/rootfs" | cut -f1) of binaries and libraries)"
  podman build "${podman_runtime_opts[@]}" "${podman_ulimit_opts[@]}" --network none --format docker \
    --layers=false --build-arg BASE_IMAGE="$cuda_base" --build-arg VERSION="$version" \
    --build-arg REVISION="$revision" -t "$image" -f "$ctx/Containerfile" "$ctx" \
    >"$work/worker-cuda.log" 2>&1 || { tail -20 "$work/worker-cuda.log" >&2; say "building worker-cuda failed (log $work/worker-cuda.log)"; exit 1; }
  rm -rf "$ctx/rootfs"
  if [ -n "$previous" ] && [ "$previous" != "$(podman image inspect --format '{{.Id}}' "$image")" ]; then
    podman rmi "$previous" >/dev/null 2>&1 || true
  fi
  say "$image: $(podman image inspect --format '{{.Size}}' "$image" | awk '{printf "%.2f GB", $1 / 1e9}')"
  echo "$image"
  exit 0
fi
if [ -n "$stage_only" ]; then
  stage "$stage_only" "${worker_bins[@]}" -- "${worker_modules[@]}"
  say "staged the worker files in $stage_only (every library but the C library's) for a base of your own;" \
    "the CUDA worker image is deploy/containers/build.sh --cuda"
  exit 0
fi

work="$build_dir/images"
mkdir -p "$work"
build_image() {  # build_image ROLE CONTAINERFILE BINARIES... [-- MODULES...]
  local role="$1" file="$2"; shift 2
  local ctx="$work/$role"
  say "staging $role in $ctx"
  stage "$ctx" "$@"
  cp "$here/$file" "$ctx/Containerfile"
  local previous
  previous=$(podman image inspect --format '{{.Id}}' "localhost/llamafleet-$role:$tag" 2>/dev/null || true)
  say "building localhost/llamafleet-$role:$tag ($(du -sh "$ctx/rootfs" | cut -f1) of binaries and libraries)"
  podman build "${podman_runtime_opts[@]}" "${podman_ulimit_opts[@]}" --network none --format docker \
    --layers=false --build-arg BASE_IMAGE="$base_image" --build-arg VERSION="$version" \
    --build-arg REVISION="$revision" -t "localhost/llamafleet-$role:$tag" -f "$ctx/Containerfile" "$ctx" \
    >"$work/$role.log" 2>&1 || { tail -20 "$work/$role.log" >&2; say "building $role failed (log $work/$role.log)"; exit 1; }
  rm -rf "$ctx/rootfs"
  # The image this tag named before is now untagged: remove it unless a container uses it.
  if [ -n "$previous" ] && [ "$previous" != "$(podman image inspect --format '{{.Id}}' "localhost/llamafleet-$role:$tag")" ]; then
    podman rmi "$previous" >/dev/null 2>&1 || true
  fi
}
[ "$only" = worker ] || build_image coordinator Containerfile.coordinator "${coordinator_bins[@]}"
[ "$only" = coordinator ] || build_image worker Containerfile.worker "${worker_bins[@]}" -- "${worker_modules[@]}"
for role in coordinator worker; do
  [ -n "$only" ] && [ "$only" != "$role" ] && continue
  echo "localhost/llamafleet-$role:$tag"
done
