#!/usr/bin/env bash
# llamafleet on one machine, end to end: builds what it needs, starts a coordinator and
# two CPU workers, makes a tiny Llama-2 setup (SentencePiece tokenizer and a
# prompt/completion dataset from license texts Debian ships), submits a 2-node FULL_SHARD
# finetuning job, shows its progress live, and ends with the job's checkpoints and the
# exported HF-format model. Every process it starts is stopped when it ends (Ctrl-C too).
#
#   deploy/local/demo.sh                 # the whole demo
#   deploy/local/demo.sh --keep          # leave coordinator and workers running until Ctrl-C
#   deploy/local/demo.sh --data FILE     # use your own prompt/completion JSONL
#
# Environment: LLAMAFLEET_BUILD_DIR (default build), LLAMAFLEET_DEMO_DIR (default ./var).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD

keep=0
own_data=""
while [ $# -gt 0 ]; do
  case "$1" in
    --keep) keep=1 ;;
    --data) own_data="$2"; shift ;;
    *) echo "usage: deploy/local/demo.sh [--keep] [--data FILE]" >&2; exit 2 ;;
  esac
  shift
done

build_dir="${LLAMAFLEET_BUILD_DIR:-build}"
var_dir="$(mkdir -p "${LLAMAFLEET_DEMO_DIR:-./var}" && cd "${LLAMAFLEET_DEMO_DIR:-./var}" && pwd)"
demo="$var_dir/demo"
run="$(date +%Y%m%d-%H%M%S)"
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "installing missing packages and building (first run on a fresh machine: several minutes)"
bash deploy/local/install-deps.sh
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build_dir" -j"$(nproc)" \
  --target llamafleet-coordinator llamafleet-worker llamafleet-train llamafleet >/dev/null
bin="$root/$build_dir/bin"
cli="$bin/llamafleet"
start=$(date +%s)

say "making a tokenizer and a prompt/completion dataset in $demo"
mkdir -p "$demo"
if [ ! -f "$demo/tokenizer.model" ]; then
  cat /usr/share/common-licenses/GPL-3 /usr/share/common-licenses/Apache-2.0 >"$demo/corpus.txt"
  spm_train --input="$demo/corpus.txt" --model_prefix="$demo/tokenizer" --vocab_size=1000 \
    --model_type=bpe --character_coverage=1.0 --minloglevel=2 >/dev/null 2>&1
fi
if [ -n "$own_data" ]; then
  cp "$own_data" "$demo/train.jsonl"
else
  # Each sentence of the GPL: the first half is the prompt, the rest the completion
  # (the loss counts the completion only).
  /usr/bin/python3 - "$demo" <<'PY'
import json, re, sys
out = sys.argv[1]
text = open("/usr/share/common-licenses/GPL-3", errors="replace").read()
sentences = [s.strip().replace("\n", " ") for s in re.split(r"(?<=[.;:])\s+", text)]
sentences = [re.sub(r"\s+", " ", s) for s in sentences if 40 <= len(s) <= 400]
rows = []
for s in sentences:
    words = s.split(" ")
    cut = max(1, len(words) // 2)
    rows.append({"prompt": " ".join(words[:cut]) + " ", "completion": " ".join(words[cut:])})
split = max(1, len(rows) // 10)
with open(out + "/train.jsonl", "w") as f:
    for r in rows[split:]:
        f.write(json.dumps(r) + "\n")
with open(out + "/eval.jsonl", "w") as f:
    for r in rows[:split]:
        f.write(json.dumps(r) + "\n")
print(f"{len(rows) - split} training and {split} eval examples")
PY
fi

pids=()
cleanup() {
  trap - EXIT INT TERM
  if ((${#pids[@]})); then
    echo
    echo "stopping workers and coordinator"
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill -TERM "${pids[$i]}" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Workers started as root run trainers as the unprivileged user llamafleet (README:
# Security model): it reads the tokenizer and data here and writes checkpoints and the
# export here, so the demo directory is its own.
if [ "$(id -u)" -eq 0 ]; then chown -R llamafleet: "$demo"; fi

say "starting the coordinator and two CPU workers (logs in $var_dir/*.log)"
fifo="$var_dir/.coordinator.stdout"
rm -f "$fifo" && mkfifo "$fifo"
# --insecure-no-auth: a local demo on 127.0.0.1 with no tokens to hand out. A real
# cluster runs with tokens (README: Authentication).
"$bin/llamafleet-coordinator" --listen 127.0.0.1:0 --http-listen 127.0.0.1:0 \
  --data-dir "$var_dir/coordinator" --insecure-no-auth --log-level info --path-root "$demo" \
  >"$fifo" 2>>"$var_dir/coordinator.log" &
pids+=($!)
address=""
http_address=""
while IFS= read -r -t 30 line; do
  case "$line" in
    "listening on "*) address="${line#listening on }" ;;
    "http listening on "*) http_address="${line#http listening on }"; break ;;
  esac
done <"$fifo"
rm -f "$fifo"
[ -n "$address" ] || { echo "demo: the coordinator did not start; see $var_dir/coordinator.log" >&2; exit 1; }
export LLAMAFLEET_COORDINATOR="$address"
echo "web portal: http://$http_address/ui/   (metrics: http://$http_address/metrics)"
for n in 1 2; do
  "$bin/llamafleet-worker" --coordinator "$address" \
    --join-token-file "$var_dir/coordinator/join-token" --data-dir "$var_dir/worker-$n" \
    --cpu-ranks 1 --name "worker-$n" --address 127.0.0.1 --trainer "$bin/llamafleet-train" \
    2>>"$var_dir/worker-$n.log" &
  pids+=($!)
done
for _ in $(seq 1 100); do
  [ "$("$cli" workers -o json 2>/dev/null | /usr/bin/python3 -c 'import json,sys; print(sum(w.get("state")=="WORKER_READY" for w in json.load(sys.stdin).get("workers",[])))' 2>/dev/null)" = 2 ] && break
  sleep 0.2
done
"$cli" workers

say "submitting a 2-node FULL_SHARD finetuning job"
cat >"$demo/job-$run.yaml" <<YAML
name: demo-$run
labels: {demo: "true"}
model:
  preset: tiny                      # 2 layers, dim 64; seeded random init
  tokenizer: $demo/tokenizer.model
data:
  train_path: $demo/train.jsonl
  eval_path: $demo/eval.jsonl
  format: prompt_completion
training:
  max_steps: 60
  micro_batch_size: 4
  seq_len: 128
  batching: packing
  lr: 3.0e-3
  lr_schedule: {type: cosine, warmup_steps: 5}
  grad_clip: 1.0
  log_every: 5
fsdp:
  sharding: FULL_SHARD
  mixed_precision: fp32
  activation_checkpointing: false
resources:
  nodes: 2
  gpus_per_node: 1                  # one CPU rank per worker
checkpoint:
  dir: $demo/checkpoints/$run
  every_steps: 20
  keep_last: 2
output:
  export_dir: $demo/export/$run
  export_dtype: fp32
run_policy:
  max_restarts: 1
  restart_backoff_seconds: 2
YAML
echo "\$ llamafleet submit -f $demo/job-$run.yaml"
job=$("$cli" submit -f "$demo/job-$run.yaml" -o json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["jobs"][0]["job"]["id"])')
echo "job $job submitted"

say "training (llamafleet watch $job)"
"$cli" watch "$job" || true

say "result"
"$cli" get job "$job"
state=$("$cli" get job "$job" -o json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')
echo
echo "\$ llamafleet checkpoints $job"
"$cli" checkpoints "$job"
if [ "$state" = SUCCEEDED ]; then
  echo
  echo "exported model: $demo/export/$run"
  ls -l "$demo/export/$run"
  echo
  echo "demo finished in $(($(date +%s) - start)) s (after the build)"
else
  echo "the job ended $state; see: $cli describe job $job; $cli logs $job" >&2
fi
if [ "$keep" = 1 ]; then
  echo "coordinator at $address (portal http://$http_address/ui/) with two workers; Ctrl-C stops them"
  wait
fi
[ "$state" = SUCCEEDED ]
