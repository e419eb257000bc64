#include "tests/testing/fake_trainer.h"

#include <filesystem>
#include <fstream>
#include <iterator>

namespace llamafleet::testing {
namespace {

constexpr char kFakeTrainer[] = R"sh(#!/bin/sh
# llamafleet-fake-trainer
SPEC=""; RESUME=""
while [ $# -gt 0 ]; do
  case "$1" in
    --spec) SPEC="$2"; shift ;;
    --resume) RESUME="$2"; shift ;;
    # The recorded checkpoints, newest first: a fake takes the newest without verifying.
    --resume-candidates) RESUME=$(grep -o '"path":"[^"]*"' "$2" | head -1 | cut -d'"' -f4); shift ;;
  esac
  shift
done
CK=$(sed -n 's/.*"checkpoint":{[^}]*"dir":"\([^"]*\)".*/\1/p' "$SPEC")
STEPS=${LLAMAFLEET_FAKE_STEPS:-30}
CKPT_EVERY=${LLAMAFLEET_FAKE_CKPT_EVERY:-10}
PEERS="$LLAMAFLEET_FAKE_PEER_DIR"
step=0
if [ -n "$RESUME" ]; then step=$(cat "$RESUME/step"); fi
echo "rank $RANK/$WORLD_SIZE master $MASTER_ADDR:$MASTER_PORT resume=[$RESUME] start=$step threads=$OMP_NUM_THREADS" >&2
save() {
  if [ "$RANK" = 0 ] && [ -n "$CK" ]; then
    mkdir -p "$CK/step-$step" && echo $step > "$CK/step-$step/step" && echo '{}' > "$CK/step-$step/manifest.json"
    # The job's mark on its directory, as the real trainer writes it (common/job_dir_marker.h).
    echo "${LLAMAFLEET_TASK_ID%%-*}" > "$CK/.llamafleet-job"
    echo "{\"type\":\"event\",\"event\":\"checkpoint_saved\",\"step\":$step,\"path\":\"$CK/step-$step\",\"bytes\":3,\"manifest_sha256\":\"x\",\"loss\":1.0}"
  fi
}
trap 'save; exit 0' TERM
if [ "$LLAMAFLEET_FAKE_FAIL" = permanent ]; then
  echo '{"type":"event","event":"error","message":"data.train_path: no such file","code":"INVALID_ARGUMENT"}'
  exit 1
fi
[ -n "$PEERS" ] && echo $$ > "$PEERS/$MASTER_PORT-$RANK.pid"
[ "$RANK" = 0 ] && echo "{\"type\":\"event\",\"event\":\"started\",\"total_steps\":$STEPS}"
while [ $step -lt $STEPS ]; do
  sleep 0.1 &
  wait $!
  step=$((step + 1))
  DPO=""
  if [ "$LLAMAFLEET_FAKE_DPO" = 1 ]; then
    DPO=$(awk -v s=$step 'BEGIN { printf ",\"rewards_chosen\":%g,\"rewards_rejected\":%g,\"rewards_accuracies\":0.75,\"rewards_margins\":%g", s / 10, -s / 20, s / 10 + s / 20 }')
  fi
  [ "$RANK" = 0 ] && echo "{\"type\":\"metrics\",\"step\":$step,\"loss\":$((100 - step % 100)),\"lr\":0.001,\"tokens_per_s\":1000$DPO}"
  EVERY="${LLAMAFLEET_FAKE_SAMPLES_EVERY:-0}"
  if [ "$RANK" = 0 ] && [ "$EVERY" -gt 0 ] && [ $((step % EVERY)) = 0 ]; then
    echo "{\"type\":\"sample\",\"step\":$step,\"index\":0,\"prompt\":\"Q0\",\"text\":\"step $step answer 0\",\"tokens\":4,\"stop_reason\":\"eos\",\"reference\":\"step $step answer 0\",\"scores\":{\"exact_match\":1}}"
    printf '%s\n' "{\"type\":\"sample\",\"step\":$step,\"index\":1,\"prompt\":\"Q1\\nline two\",\"text\":\"step $step answer 1\",\"tokens\":4,\"stop_reason\":\"length\"}"
    if [ $step = "$EVERY" ]; then
      BIG=$(head -c 40000 /dev/zero | tr '\0' x)
      SCORES=$(awk 'BEGIN { for (i = 0; i < 12; i++) printf "%s\"s%d\":%d", (i ? "," : ""), i, i }')
      echo "{\"type\":\"sample\",\"step\":$step,\"index\":2,\"prompt\":\"Q2\",\"text\":\"$BIG\",\"tokens\":9999,\"stop_reason\":\"length\",\"scores\":{$SCORES}}"
    fi
  fi
  if [ $((step % CKPT_EVERY)) = 0 ]; then save; fi
  if [ -n "$PEERS" ]; then
    for f in "$PEERS/$MASTER_PORT"-*.pid; do
      [ -f "$f" ] || continue
      p=$(cat "$f")
      st=$(cut -d' ' -f3 "/proc/$p/stat" 2>/dev/null)
      if [ -z "$st" ] || [ "$st" = Z ]; then
        echo "{\"type\":\"event\",\"event\":\"error\",\"message\":\"gloo allreduce: connection closed by peer\",\"code\":\"UNAVAILABLE\"}"
        exit 1
      fi
    done
  fi
done
exit 0
)sh";

}  // namespace

std::string WriteFakeTrainer(const std::string& dir) {
  const std::string path = dir + "/fake-train.sh";
  std::ofstream(path) << kFakeTrainer;
  std::filesystem::permissions(path, std::filesystem::perms::owner_all);
  return path;
}

int CountTrainerProcesses(const std::string& trainer) {
  const std::string marker = trainer + std::string("\0train", 6);
  int n = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    std::ifstream stat(entry.path() / "stat");
    std::string pid, comm, state;
    if (!(stat >> pid >> comm >> state) || state == "Z") continue;
    std::ifstream in(entry.path() / "cmdline");
    std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (cmdline.find(marker) != std::string::npos) ++n;
  }
  return n;
}

}  // namespace llamafleet::testing
