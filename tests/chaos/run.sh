#!/bin/sh
# The chaos harness (tests/chaos/chaos.py): real coordinator, workers and trainers, a seeded
# schedule of faults, and the recovery invariants checked after each scenario.
#
#   tests/chaos/run.sh                    every scenario once
#   tests/chaos/run.sh --set ctest        what ctest runs (chaos_test)
#   tests/chaos/run.sh --set coord        scenarios that need the coordinator recovery fixes
#   tests/chaos/run.sh --soak N [--seed S]  N scenarios drawn at random; prints the table
#   tests/chaos/run.sh --list
# Binaries come from $LLAMAFLEET_BIN (default build/bin). Needs root for the tmpfs of the
# fs_full scenario.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bin=${LLAMAFLEET_BIN:-$here/../../build/bin}
exec python3 "$here/chaos.py" --bin "$bin" "$@"
