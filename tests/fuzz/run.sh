#!/usr/bin/env bash
# Builds the libFuzzer harnesses (clang, ASan + UBSan; tests/fuzz/CMakeLists.txt), replays
# every kept input (corpus/<harness>/, the seeds, and regressions/<harness>/, the inputs of
# past findings), then fuzzes each harness for a bounded time. Exits non-zero on any
# finding: a crash, a sanitizer report, a failed property, a timeout or an out-of-memory,
# whose input is left in the output folder to be kept under regressions/ once fixed.
#
#   tests/fuzz/run.sh --seconds 60              # every harness, 60 s each
#   tests/fuzz/run.sh --seconds 20 --jobs 2     # two at a time (default: the cores)
#   tests/fuzz/run.sh --only hf_config          # one harness (repeatable)
#   tests/fuzz/run.sh --replay                  # build and replay the kept inputs only
#
# Environment: LLAMAFLEET_FUZZ_DIR (default ~/.cache/llamafleet/fuzz) holds the build,
# the growing work corpus of each harness (kept between runs, so later runs start where
# earlier ones got to) and out/, the logs and findings of the last run. The build goes
# through ccache (CCACHE_DIR, default ~/.cache/ccache) like tests/run.sh.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"

seconds=60
jobs="$(nproc)"
replay_only=0
only=()
while (($#)); do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    --only) only+=("$2"); shift 2 ;;
    --replay) replay_only=1; shift ;;
    *) echo "usage: tests/fuzz/run.sh [--seconds N] [--jobs N] [--only HARNESS]... [--replay]" >&2; exit 2 ;;
  esac
done

harnesses=(jobspec_yaml jobspec_json sweep_expansion http_target cli_table trainer_events gpu_health safetensors_header
  safetensors_index hf_config checkpoint_manifest peft_adapter_config token_file model_file_memory
  tokenizer_json tiktoken_ranks chat_record preference_record gguf_file tokenizer_vocab)
if ((${#only[@]})); then harnesses=("${only[@]}"); fi

for tool in clang++ cmake; do
  command -v "$tool" >/dev/null || { echo "fuzz: $tool missing (deploy/local/install-deps.sh)" >&2; exit 1; }
done

dir="${LLAMAFLEET_FUZZ_DIR:-$HOME/.cache/llamafleet/fuzz}"
build="$dir/build"
out="$dir/out"
rm -rf "$out"
# A build configured from another checkout (a clone elsewhere) cannot be reused by CMake;
# start it again (ccache keeps that cheap). The work corpora stay.
if [ -f "$build/CMakeCache.txt" ] &&
   ! grep -qxF "CMAKE_HOME_DIRECTORY:INTERNAL=$here" "$build/CMakeCache.txt"; then
  rm -rf "$build"
fi
mkdir -p "$build" "$out"
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
export CCACHE_BASEDIR="$root"
export CCACHE_NOHASHDIR=1

cmake -S "$here" -B "$build" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=None >"$out/configure.log" 2>&1 ||
  { cat "$out/configure.log" >&2; exit 1; }
targets=()
for h in "${harnesses[@]}"; do targets+=("fuzz_$h"); done
cmake --build "$build" -j"$jobs" --target "${targets[@]}" >"$out/build.log" 2>&1 ||
  { tail -n 60 "$out/build.log" >&2; echo "fuzz: build failed (log: $out/build.log)" >&2; exit 1; }

# Inputs this run reads: seeds and regressions, as directories (created when missing so
# libFuzzer is always given the same arguments).
kept_dirs() {
  local h="$1"
  mkdir -p "$here/corpus/$h" "$here/regressions/$h"
  echo "$here/corpus/$h" "$here/regressions/$h"
}

options=(-timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 -print_final_stats=1)
run_one() {
  local h="$1" bin="$build/fuzz_$1" log="$out/$1.log"
  local dict=()
  [ -f "$here/dict/$h.dict" ] && dict=(-dict="$here/dict/$h.dict")
  # shellcheck disable=SC2046
  if ! "$bin" "${options[@]}" -runs=0 $(kept_dirs "$h") >"$log.replay" 2>&1; then
    echo "FAIL $h: a kept input fails (log: $log.replay)"
    return 1
  fi
  ((replay_only)) && { echo "ok   $h: kept inputs replayed"; return 0; }
  mkdir -p "$dir/corpus/$h"
  # shellcheck disable=SC2046
  if "$bin" "${options[@]}" "${dict[@]}" -max_total_time="$seconds" -artifact_prefix="$out/$h-" \
      "$dir/corpus/$h" $(kept_dirs "$h") >"$log" 2>&1; then
    local runs
    runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)"
    echo "ok   $h: ${runs:-?} executions in ${seconds} s, no finding"
  else
    echo "FAIL $h: finding (log: $log; input: $(ls "$out/$h-"* 2>/dev/null | head -n 1))"
    return 1
  fi
}

status=0
pids=()
names=()
results="$out/results"
for h in "${harnesses[@]}"; do
  while (($(jobs -rp | wc -l) >= jobs)); do wait -n || true; done
  (run_one "$h" >"$results.$h"; echo $? >"$results.$h.rc") &
  pids+=($!)
  names+=("$h")
done
wait || true
for h in "${names[@]}"; do
  cat "$results.$h"
  [ "$(cat "$results.$h.rc")" = 0 ] || status=1
done
if ((status)); then
  for h in "${names[@]}"; do
    if [ "$(cat "$results.$h.rc")" != 0 ]; then
      echo "---- $h" >&2
      tail -n 40 "$out/$h.log" 2>/dev/null >&2 || tail -n 40 "$out/$h.log.replay" >&2
    fi
  done
fi
exit "$status"
