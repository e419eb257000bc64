#!/usr/bin/env bash
# llamafleet on one machine, end to end: builds what it needs, starts a coordinator and
# two CPU workers, makes a tiny Llama-2 setup (SentencePiece tokenizer and a
# prompt/completion dataset of GPL-3 sentences from the license texts Debian ships), trains
# a small base model once on the other licenses (cached), submits a 2-node FULL_SHARD
# finetuning job on top of it, shows its progress live, and ends with the job's
# checkpoints, the exported HF-format model, the held-out loss before and after, and next
# steps. Every process it starts is stopped when it ends (Ctrl-C too).
#
#   deploy/local/demo.sh                 # the whole demo
#   deploy/local/demo.sh --keep          # leave coordinator and workers running until Ctrl-C
#   deploy/local/demo.sh --data FILE     # use your own prompt/completion JSONL
#   deploy/local/demo.sh --lora          # a LoRA job: a PEFT adapter and the merged model
#   deploy/local/demo.sh --chat          # the same sentences as conversations (data.format
#                                        # chat, Llama 2's template, loss on the answers only),
#                                        # and what the model writes before and after
#
# Building: installs only the packages building and running need
# (deploy/local/install-deps.sh --build-only). A build directory configured for this
# checkout is brought up to date; one that already holds the binaries but belongs to
# another checkout (or has no CMake cache) is used as it is; otherwise a new one is
# configured without tests (tests/run.sh turns them on in the same directory).
#
# Each run is a fresh cluster in DEMO_DIR/runs/<time>/ (database, worker dirs, logs), so
# nothing of an earlier, interrupted run comes back; earlier runs' cluster directories are
# removed unless their coordinator still runs. The tokenizer, data, checkpoints and
# exports stay in DEMO_DIR/demo/. If the demo is interrupted while its job runs, the job
# is cancelled before the cluster stops.
#
# Environment: LLAMAFLEET_BUILD_DIR (default build; relative to the checkout or absolute),
# LLAMAFLEET_DEMO_DIR (DEMO_DIR, default ./var), LLAMAFLEET_DEMO_BASE_CACHE (where the
# base model is kept, default ~/.cache/llamafleet/demo-base).
set -euo pipefail
caller_dir=$PWD
cd "$(dirname "$0")/../.."
root=$(pwd -P)

keep=0
lora=0
chat=0
own_data=""
usage="usage: deploy/local/demo.sh [--keep] [--lora] [--chat] [--data FILE]"
while [ $# -gt 0 ]; do
  case "$1" in
    --keep) keep=1 ;;
    --lora) lora=1 ;;
    --chat) chat=1 ;;
    --data)
      [ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }
      case "$2" in /*) own_data="$2" ;; *) own_data="$caller_dir/$2" ;; esac
      shift ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
  shift
done
if [ "$chat" = 1 ] && [ -n "$own_data" ]; then
  echo "demo: --chat makes its own conversations; --data takes prompt/completion JSONL" >&2
  exit 2
fi

build_dir="${LLAMAFLEET_BUILD_DIR:-build}"
case "$build_dir" in /*) ;; *) build_dir="$root/$build_dir" ;; esac
var_dir="$(mkdir -p "${LLAMAFLEET_DEMO_DIR:-./var}" && cd "${LLAMAFLEET_DEMO_DIR:-./var}" && pwd)"
demo="$var_dir/demo"
run="$(date +%Y%m%d-%H%M%S)"
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "installing missing packages (first run on a fresh machine: several minutes)"
bash deploy/local/install-deps.sh --build-only

bin="$build_dir/bin"
targets=(llamafleet-coordinator llamafleet-worker llamafleet-train llamafleet)
have_binaries() {
  local t
  for t in "${targets[@]}"; do [ -x "$bin/$t" ] || return 1; done
}
# The source directory the build directory was configured for ("" without a cache).
configured_for=""
if [ -f "$build_dir/CMakeCache.txt" ]; then
  configured_for="$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build_dir/CMakeCache.txt")"
  configured_for="$(cd "$configured_for" 2>/dev/null && pwd -P || echo "$configured_for")"
fi
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
if [ "$configured_for" = "$root" ]; then
  say "building (incremental) in $build_dir"
  if grep -q '^LLAMAFLEET_BUILD_TRAINER:BOOL=OFF' "$build_dir/CMakeCache.txt"; then
    cmake -S . -B "$build_dir" -DLLAMAFLEET_BUILD_TRAINER=ON >/dev/null  # the demo trains
  fi
  cmake --build "$build_dir" -j"$(nproc)" --target "${targets[@]}" >/dev/null
elif have_binaries; then
  echo "using the binaries in $bin${configured_for:+ (built from $configured_for)}, as they are"
elif [ -n "$configured_for" ]; then
  echo "demo: $build_dir is configured for another checkout ($configured_for) and lacks" \
    "${targets[*]}; set LLAMAFLEET_BUILD_DIR to a new directory" >&2
  exit 1
else
  say "configuring and building in $build_dir (first build: several minutes)"
  cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLLAMAFLEET_BUILD_TESTS=OFF >/dev/null
  cmake --build "$build_dir" -j"$(nproc)" --target "${targets[@]}" >/dev/null
fi
cli="$bin/llamafleet"
start=$(date +%s)

say "making a tokenizer and a prompt/completion dataset in $demo"
mkdir -p "$demo"
if [ ! -f "$demo/tokenizer.model" ]; then
  cat /usr/share/common-licenses/GPL-3 /usr/share/common-licenses/Apache-2.0 >"$demo/corpus.txt"
  spm_train --input="$demo/corpus.txt" --model_prefix="$demo/tokenizer" --vocab_size=1000 \
    --model_type=bpe --character_coverage=1.0 --minloglevel=2 >/dev/null 2>&1
fi
eval_line="  eval_path: $demo/eval.jsonl"
if [ -n "$own_data" ]; then
  cp "$own_data" "$demo/train.jsonl"
  eval_line=""  # no eval split of someone else's data
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
# The same split as conversations: a system turn, the sentence's first half as the user's
# turn, the rest as the assistant's answer (data.format chat; the loss counts the answer).
def chat(r):
    return {"messages": [{"role": "system", "content": "Finish the sentence from the GNU GPL version 3."},
                         {"role": "user", "content": r["prompt"].strip()},
                         {"role": "assistant", "content": r["completion"]}]}
for name, part in (("chat-train", rows[split:]), ("chat-eval", rows[:split])):
    with open(f"{out}/{name}.jsonl", "w") as f:
        for r in part:
            f.write(json.dumps(chat(r)) + "\n")
with open(out + "/chat-prompts.jsonl", "w") as f:
    for r in rows[:2]:  # two held-out sentences, the answer left for the model to write
        f.write(json.dumps({"messages": chat(r)["messages"][:2]}) + "\n")
print(f"{len(rows) - split} training and {split} eval examples")
PY
fi
# What the job trains on: prompt/completion pairs, or (--chat) the same pairs as
# conversations rendered with Llama 2's chat template (the demo's tokenizer has no
# template of its own).
format=prompt_completion
train_file="$demo/train.jsonl"
eval_file="$demo/eval.jsonl"
format_line="  format: prompt_completion"
eval_flags=(--format prompt_completion)
if [ "$chat" = 1 ]; then
  format=chat
  train_file="$demo/chat-train.jsonl"
  eval_file="$demo/chat-eval.jsonl"
  format_line="  format: chat
  chat_template: llama2"
  eval_flags=(--format chat --chat-template llama2)
fi
[ -n "$own_data" ] || eval_line="  eval_path: $eval_file"

# The finetune starts from a small base model, not from random weights: the tiny preset
# trained once on the license texts Debian ships other than the GPL family (the finetune
# learns the GPL-3), cached in BASE_CACHE/<key>, the key a digest of what made it (this
# spec, the corpus, the tokenizer), and copied into the demo directory, the coordinator's
# path root.
base_cache="${LLAMAFLEET_DEMO_BASE_CACHE:-$HOME/.cache/llamafleet/demo-base}"
base_trained=""
base_spec() {  # $1: corpus, $2: export directory
  cat <<YAML
name: demo-base
model: {preset: tiny, tokenizer: $demo/tokenizer.model}
data: {train_path: $1, format: text}
training: {max_steps: 240, micro_batch_size: 8, seq_len: 128, batching: packing, lr: 5.0e-3,
           lr_schedule: {type: cosine, warmup_steps: 20}, grad_clip: 1.0, log_every: 60, seed: 7}
fsdp: {sharding: NO_SHARD, mixed_precision: fp32, activation_checkpointing: false}
output: {export_dir: $2, export_dtype: fp32}
YAML
}
mkdir -p "$base_cache"
/usr/bin/python3 - "$base_cache/corpus.jsonl" <<'PY'
import glob, json, os, re, sys
rows = []
for path in sorted(glob.glob("/usr/share/common-licenses/*")):
    name = os.path.basename(path)
    if name.startswith(("GPL", "LGPL")) or os.path.islink(path) or not os.path.isfile(path):
        continue
    for para in re.split(r"\n\s*\n", open(path, errors="replace").read()):
        para = re.sub(r"\s+", " ", para).strip()
        if len(para) >= 40:
            rows.append({"text": para})
tmp = sys.argv[1] + ".tmp"
with open(tmp, "w") as f:
    for r in rows:
        f.write(json.dumps(r) + "\n")
os.replace(tmp, sys.argv[1])
PY
base_key=$( { base_spec CORPUS EXPORT; cat "$base_cache/corpus.jsonl" "$demo/tokenizer.model"; } | sha256sum | cut -c1-16)
base="$base_cache/$base_key"
if [ ! -f "$base/config.json" ]; then
  say "training the demo's base model once (about a minute on 2 cores; later runs reuse $base)"
  rm -rf "$base.tmp" && mkdir -p "$base.tmp"
  base_spec "$base_cache/corpus.jsonl" "$base.tmp/model" >"$base.tmp/spec.yaml"
  # One thread: a model this small gains nothing from more, and OpenMP threads that meet
  # other work on the cores spin against it (docs/operations.md).
  if ! OMP_NUM_THREADS=1 "$bin/llamafleet-train" train --spec "$base.tmp/spec.yaml" \
      --token-cache-dir "$base_cache/tokens" 2>&1 >/dev/null | tee "$base.tmp/train.log" |
      sed -un 's/.*\(step [0-9]*\/[0-9]* loss [0-9.]*\).*/  \1/p'; then
    echo "demo: training the base model failed; see $base.tmp/train.log" >&2
    exit 1
  fi
  rm -rf "$base" && mv "$base.tmp/model" "$base" && rm -rf "$base.tmp"
  base_trained=1
fi
rm -rf "$demo/base" && cp -r "$base" "$demo/base"
echo "base model: $base (the tiny preset trained on $(wc -l <"$base_cache/corpus.jsonl") license paragraphs)"
before=""
if [ -z "$own_data" ]; then
  before=$(OMP_NUM_THREADS=1 "$bin/llamafleet-train" eval --model "$demo/base" --tokenizer "$demo/tokenizer.model" \
    --data "$eval_file" "${eval_flags[@]}" --seq-len 128 2>/dev/null |
    /usr/bin/python3 -c 'import json,sys; print(*["%.4f" % r["loss"] for r in map(json.loads, sys.stdin) if "loss" in r][-1:])' ||
    true)
  if [ -n "$before" ]; then echo "the base model's eval loss on the held-out GPL-3 sentences: $before"; fi
fi
# --chat: what a model writes for the two held-out prompts (greedy, through the template).
show_answers() {  # $1: model directory
  OMP_NUM_THREADS=1 "$bin/llamafleet-train" generate --model "$1" --tokenizer "$demo/tokenizer.model" \
    --prompts "$demo/chat-prompts.jsonl" --chat --chat-template llama2 --max-new-tokens 24 2>/dev/null |
    /usr/bin/python3 -c '
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    if "stop_reason" in r:
        print("  [%d] %s" % (r["index"], r["text"].strip()))' || true
}
if [ "$chat" = 1 ]; then
  echo "what the base model answers to two held-out sentence starts:"
  show_answers "$demo/base"
fi

# A fresh cluster per run. An earlier run's cluster is removed unless its coordinator
# still holds DIR/LOCK (a --keep run in another terminal).
mkdir -p "$var_dir/runs"
for old in "$var_dir"/runs/*/; do
  [ -d "$old" ] || continue
  if [ -f "$old/coordinator/LOCK" ] && ! flock -n "$old/coordinator/LOCK" true; then continue; fi
  rm -rf "$old"
done
cluster="$var_dir/runs/$run"
mkdir -p "$cluster"

pids=()
job=""
finished=0
cleanup() {
  trap - EXIT INT TERM
  if [ -n "$job" ] && [ "$finished" = 0 ]; then
    echo
    echo "cancelling job $job"
    "$cli" cancel "$job" --reason "demo interrupted" --timeout 5s >/dev/null 2>&1 || true
  fi
  if ((${#pids[@]})); then
    echo
    echo "stopping workers and coordinator"
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill -TERM "${pids[$i]}" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# One machine, one user: workers started as root run every job's trainers as the
# unprivileged user llamafleet (--run-as, the single-identity mode of docs/security.md),
# which reads the tokenizer and data here and writes checkpoints and the export here, so
# the demo directory is its own.
run_as=()
if [ "$(id -u)" -eq 0 ]; then
  chown -R llamafleet: "$demo"
  run_as=(--run-as llamafleet)
fi

say "starting the coordinator and two CPU workers (logs in $cluster/*.log)"
fifo="$cluster/.coordinator.stdout"
rm -f "$fifo" && mkfifo "$fifo"
# --insecure-no-auth: a local demo on 127.0.0.1 with no tokens to hand out. A real
# cluster runs with tokens (docs/security.md).
"$bin/llamafleet-coordinator" --listen 127.0.0.1:0 --http-listen 127.0.0.1:0 \
  --data-dir "$cluster/coordinator" --insecure-no-auth --log-level info --path-root "$demo" \
  >"$fifo" 2>>"$cluster/coordinator.log" &
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
[ -n "$address" ] || { echo "demo: the coordinator did not start; see $cluster/coordinator.log" >&2; exit 1; }
export LLAMAFLEET_COORDINATOR="$address"
echo "web portal: http://$http_address/ui/   (metrics: http://$http_address/metrics)"
# The two workers share this machine: each gets every other core (when there are two or
# more), so their ranks' threads (a worker gives each rank its cores) do not fight over them.
mapfile -t cores < <(/usr/bin/python3 -c 'import os; print("\n".join(map(str, sorted(os.sched_getaffinity(0)))))')
for n in 1 2; do
  pin=()
  if [ "${#cores[@]}" -ge 2 ]; then
    mine=()
    for ((i = n - 1; i < ${#cores[@]}; i += 2)); do mine+=("${cores[$i]}"); done
    pin=(taskset -c "$(IFS=,; echo "${mine[*]}")")
  fi
  "${pin[@]}" "$bin/llamafleet-worker" --coordinator "$address" \
    --join-token-file "$cluster/coordinator/join-token" --data-dir "$cluster/worker-$n" \
    --cpu-ranks 1 --name "worker-$n" --address 127.0.0.1 --trainer "$bin/llamafleet-train" \
    "${run_as[@]}" 2>>"$cluster/worker-$n.log" &
  pids+=($!)
done
for _ in $(seq 1 100); do
  [ "$("$cli" workers -o json 2>/dev/null | /usr/bin/python3 -c 'import json,sys; print(sum(w.get("state")=="WORKER_READY" for w in json.load(sys.stdin).get("workers",[])))' 2>/dev/null)" = 2 ] && break
  sleep 0.2
done
"$cli" workers

say "submitting a 2-node FULL_SHARD $([ "$lora" = 1 ] && echo "LoRA" || echo "full") finetuning job on $format data"
peft_block=""
merge_line=""
eval_block=""
export_line=""
if [ -z "$own_data" ]; then
  # 166 sentences are learnt by heart within a few dozen steps: evaluate every 5, stop
  # once the held-out loss stops falling, and export the weights of its lowest point.
  eval_block="  eval_every_steps: 5
  early_stopping: {patience: 3, min_delta: 0.005}
eval:
  samples: {from_eval: 2, max_new_tokens: 24}   # what the model writes at each evaluation"
  export_line="  export: best"
fi
if [ "$lora" = 1 ]; then
  peft_block="peft: {method: lora, r: 8, alpha: 16, dropout: 0.05, target_modules: [q_proj, k_proj, v_proj, o_proj]}"
  merge_line="  merge: true"
fi
cat >"$demo/job-$run.yaml" <<YAML
name: demo-$run
labels: {demo: "true"}
model:
  path: $demo/base                  # the tiny preset (2 layers, dim 64) trained on license texts
  tokenizer: $demo/tokenizer.model
data:
  train_path: $train_file
$eval_line
$format_line
training:
  max_steps: 60
  micro_batch_size: 4
  seq_len: 128
  batching: packing
  lr: 1.0e-3
  lr_schedule: {type: cosine, warmup_steps: 5}
  grad_clip: 1.0
  log_every: 5
$eval_block
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
$export_line
$merge_line
$peft_block
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
case "$state" in SUCCEEDED | FAILED | CANCELLED) finished=1 ;; esac
echo
echo "\$ llamafleet checkpoints $job"
"$cli" checkpoints "$job"
echo
echo "\$ llamafleet attempts $job      # where each start went"
"$cli" attempts "$job"
if [ "$state" = SUCCEEDED ]; then
  if [ -z "$own_data" ]; then
    echo
    echo "\$ llamafleet samples $job --latest      # what the model wrote at its last evaluation"
    "$cli" samples "$job" --latest || true
  fi
  echo
  echo "exported model: $demo/export/$run"
  ls -l "$demo/export/$run"
  after=$("$cli" get job "$job" -o json | /usr/bin/python3 -c \
    'import json,sys; m=json.load(sys.stdin).get("latest_metrics",{}); print("%.4f" % m["best_eval_loss"] if "best_eval_loss" in m else "")')
  if [ -n "$before" ] && [ -n "$after" ]; then
    echo
    echo "eval loss on the held-out GPL-3 sentences: $before (the base model) -> $after (the finetuned export)"
  fi
  if [ "$chat" = 1 ]; then
    echo
    echo "what the finetuned model answers to the same two sentence starts:"
    show_answers "$demo/export/$run"
  fi
  echo
  echo "demo finished in $(($(date +%s) - start)) s (after the build${base_trained:+; including training the base model})"
  if [ "$keep" = 0 ]; then
    say "next steps"
    echo "  deploy/local/demo.sh --keep      # the same, and the cluster stays up for jobs of your own"
    echo "  deploy/local/demo.sh --lora      # a LoRA adapter on the same base model"
    echo "  deploy/local/demo.sh --chat      # the same sentences as conversations"
    echo "  $bin/llamafleet-train eval --model $demo/export/$run --data $eval_file ${eval_flags[*]} --seq-len 128"
    echo "  $bin/llamafleet-train generate --model $demo/export/$run --tokenizer $demo/tokenizer.model --prompt 'This License'"
    echo "  less $cluster/coordinator/logs/$job/attempt-1/rank-0.log   # what the trainer printed"
  fi
else
  echo "the job ended $state; see: $cli describe job $job; $cli logs $job" >&2
fi
if [ "$keep" = 1 ]; then
  say "the cluster keeps running until Ctrl-C; from another shell:"
  echo "  export LLAMAFLEET_COORDINATOR=$address"
  echo "  $cli get jobs"
  echo "  $cli submit -f $demo/job-$run.yaml --dry-run    # edit a copy: name, paths, steps"
  echo "  sed 's|/fsx/demo|$demo|g' $root/deploy/examples/tiny-lora.yaml > $demo/my-lora.yaml"
  echo "  $cli submit -f $demo/my-lora.yaml    # an example of your own: LoRA on the same base model"
  echo "web portal: http://$http_address/ui/"
  if [ "${#run_as[@]}" -gt 0 ]; then
    echo "data, models and outputs go under $demo, the only path root; jobs run as the user"
    echo "llamafleet, which must be able to read your inputs there and write the outputs:"
    echo "  chown -R llamafleet: $demo"
  else
    echo "data, models and outputs go under $demo, the only path root (jobs run as $(id -un))"
  fi
  wait
fi
[ "$state" = SUCCEEDED ]
