#!/usr/bin/env bash
# Builds the in-process unit tests (no trainer, no child processes) with AddressSanitizer
# and UndefinedBehaviorSanitizer (-DLLAMAFLEET_SANITIZE=address,undefined; every report
# is fatal) and runs them. The storage, scheduler, job spec, HTTP, gRPC service, cluster
# and CLI-output code they drive is the coordinator's and the CLI's own; the parsers of
# what others write are fuzzed under the same sanitizers by tests/fuzz/run.sh.
#
#   tests/sanitize/run.sh              # build and run every listed suite
#   tests/sanitize/run.sh -R jobspec   # extra arguments go to ctest
#
# Environment: LLAMAFLEET_SANITIZE_BUILD_DIR (default build-sanitize), JOBS (default: the
# cores). The build goes through ccache like tests/run.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."

suites=(attempt_phases_test cli_output_test cluster_manager_test cluster_parts_test
  connection_limits_test dependencies_test hang_rules_test http_api_test job_dir_fd_test
  job_service_test job_store_test job_store_file_test jobspec_test memory_estimate_test metrics_test
  node_health_test queued_jobs_test scheduler_test straggler_rules_test submit_policy_test
  sweep_test tensor_parallel_test tensorboard_writer_test trainer_events_test
  usage_service_test usage_store_test webhooks_test worker_drain_store_test writer_queue_test
  gpu_health_test gpu_health_rules_test)

build_dir="${LLAMAFLEET_SANITIZE_BUILD_DIR:-build-sanitize}"
jobs="${JOBS:-$(nproc)}"
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
# -O1: the sanitizers' usual trade between build time, run time and useful stacks.
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" \
  -DLLAMAFLEET_SANITIZE=address,undefined -DLLAMAFLEET_BUILD_TRAINER=OFF -DLLAMAFLEET_BUILD_TESTS=ON >/dev/null
cmake --build "$build_dir" -j"$jobs" --target "${suites[@]}"
regex="^($(IFS='|'; echo "${suites[*]}"))\$"
# Leaks are reported too (detect_leaks is LeakSanitizer's default with ASan); a report
# fails its suite.
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=0:detect_stack_use_after_return=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
ctest --test-dir "$build_dir" --output-on-failure --timeout 900 -j"$jobs" -R "$regex" "$@"
