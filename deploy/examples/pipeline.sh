#!/usr/bin/env bash
# Runs deploy/examples/sweep.yaml (a 2 x 2 LoRA sweep, two points at a time) and then
# deploy/examples/pipeline.yaml (LoRA finetune, then an evaluation of its merged export)
# as a script would: submit, wait, and branch on how the jobs ended. Against a
# running coordinator, e.g. `deploy/local/demo.sh --keep` in another terminal, whose data
# (tokenizer, train.jsonl, eval.jsonl) are in DEMO_DIR; the /fsx/demo paths of the file
# are replaced by it, and the pipeline's export goes to DEMO_DIR/pipeline/RUN (an export
# directory belongs to the job that made it: a new run, on a new cluster, needs its own).
# Running it again with the same RUN on the same cluster creates nothing new.
#
#   deploy/examples/pipeline.sh [DEMO_DIR]     # default ./var/demo
#
# Environment: LLAMAFLEET_COORDINATOR (default 127.0.0.1:7070, as the CLI),
# LLAMAFLEET_CLI (default build/bin/llamafleet), RUN (default: the time now).
set -uo pipefail
cd "$(dirname "$0")/../.."
demo="$(cd "${1:-var/demo}" && pwd)" || { echo "pipeline.sh: no demo dir ${1:-var/demo} (run deploy/local/demo.sh --keep)" >&2; exit 2; }
cli="${LLAMAFLEET_CLI:-build/bin/llamafleet}"
spec="$(mktemp --suffix=.yaml)"
trap 'rm -f "$spec"' EXIT

# The sweep: four jobs, at most two running; then its points and their final losses.
sed "s|/fsx/demo|$demo|g" deploy/examples/sweep.yaml >"$spec"
"$cli" submit -f "$spec" --wait --timeout 30m || { echo "sweep: not every point succeeded (exit $?)"; exit 1; }
"$cli" get jobs --sweep lr-rank

run="${RUN:-$(date +%Y%m%d-%H%M%S)}"
sed -e "s|/fsx/demo/pipeline|$demo/pipeline/$run|g" -e "s|/fsx/demo|$demo|g" deploy/examples/pipeline.yaml >"$spec"

# One line per job as it ends; the exit code says how (README: exit codes).
"$cli" submit -f "$spec" --wait --timeout 30m
case $? in
  0) echo "pipeline: finetuned and evaluated; the merged model is in $demo/pipeline/$run/adapter/merged" ;;
  3) echo "pipeline: a job failed (llamafleet logs ID)"; exit 3 ;;
  4) echo "pipeline: a job was cancelled (the evaluation is cancelled with its parent)"; exit 4 ;;
  5) echo "pipeline: still running after 30 minutes (llamafleet wait ID to go on waiting)"; exit 5 ;;
  *) exit 1 ;;
esac
