#ifndef LLAMAFLEET_WORKER_TRAINER_EVENTS_H_
#define LLAMAFLEET_WORKER_TRAINER_EVENTS_H_

// The trainer's stdout contract, in one place: every JSON line `llamafleet-train train`
// prints is written with ToLine() here and read back with ParseLine() here (by the worker
// agent, which turns them into metrics/checkpoint reports and the rank's exit record).
// No Torch: the agent links it too.
//
// Lines (one JSON object each; keys as written by ToLine):
//   {"type":"event","event":"started", world_size, parameters, total_steps, ...}
//   {"type":"metrics", step, epoch, loss, lr, grad_norm, tokens, tokens_per_s, tflops,
//    peak_mem_bytes, mfu (null when unknown), and with DPO rewards_chosen, rewards_rejected,
//    rewards_accuracies, rewards_margins}
//   {"type":"event","event":"resumed", path, step, skipped: [{path, reason}]}
//   {"type":"event","event":"checkpoint_saved", path, step, bytes, manifest_sha256, loss,
//    eval_loss (only when an evaluation ran at the step)}
//   {"type":"event","event":"phase", phase, seconds, since_start, detail}
//   {"type":"event","event":"tokenizing", path, done_bytes, total_bytes}
//                      (only a worker's ranks print it, and before "started": data comes
//                      first; a run on its own prints "started" first)
//   {"type":"event","event":"preempted", step, loss}
//   {"type":"eval", step, loss, perplexity, tokens}
//   {"type":"sample", step, index, prompt, text, tokens, stop_reason, reference, scores}
//                      (eval.samples: one per prompt after each evaluation's "eval" lines;
//                      reference and scores only when the prompt has a reference)
//   {"type":"event","event":"stopped_early", step, best_step, best_loss, reason}
//                      (training.early_stopping; "finished" follows)
//   {"type":"event","event":"finished", steps, loss, export_dir}
//   {"type":"event","event":"exit", code, message}    always the last line of a run
//   {"type":"progress", step, collectives, in_collective, busy_s, wait_s}
//                      (every rank, about once a second from a background thread, while
//                      the worker runs it: LLAMAFLEET_PROGRESS_EVENTS; never after "exit")
// Beside each metrics and stopped_early record, rank 0 writes the same as a line of text
// on stderr ("step 5/60 loss ...", "stopped early at step ..."); `llamafleet logs` shows
// that line and leaves those two records out (clients/cli/log_record.h).
// The exit record's code is an absl canonical code name ("OK", "INVALID_ARGUMENT", ...).
// An older trainer's {"event":"error", code, message} line is read as an exit record.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "jobspec/memory_estimate.h"

namespace llamafleet::trainer_events {

struct Started {
  int world_size = 1;
  int64_t parameters = 0;
  int64_t total_steps = 0;
  int64_t steps_per_epoch = 0;
  int64_t train_rows = 0;
  int64_t seq_len = 0;
  int64_t global_batch = 0;  // sequences per optimizer step
  int64_t grad_accum = 0;    // micro-steps per optimizer step on this world size
  int64_t trainable_parameters = 0;  // what the optimizer updates (LoRA: the adapters)
  // The memory-fit estimate of the run as it really is, in bytes per device, next to
  // which the metrics' peak_mem_bytes is measured.
  sched::MemoryEstimate memory_estimate;
};

struct Metrics {
  int64_t step = 0;  // optimizer steps completed
  int64_t epoch = 0;
  double loss = 0;  // mean over the steps since the last metrics line
  double lr = 0;
  double grad_norm = 0;
  int64_t tokens = 0;  // tokens trained on so far
  double tokens_per_s = 0;
  double tflops = 0;
  int64_t peak_mem_bytes = 0;
  std::optional<double> mfu;  // unknown without the device's peak
  // training.objective dpo: TRL's rewards/* over the same steps as `loss`. The rewards
  // are beta x (policy - reference) summed log-probabilities of each answer, averaged
  // over pairs; accuracies the fraction of pairs whose chosen reward is the greater.
  struct Dpo {
    double rewards_chosen = 0;
    double rewards_rejected = 0;
    double rewards_accuracies = 0;
    double rewards_margins = 0;  // chosen - rejected
  };
  std::optional<Dpo> dpo;
};

// Which checkpoint a run resumed from, and the newer candidates it refused (and why).
struct Resumed {
  struct Skipped {
    std::string path;
    std::string reason;
  };
  std::string path;
  int64_t step = 0;
  std::vector<Skipped> skipped;
};

struct CheckpointSaved {
  std::string path;  // the step-N directory holding the manifest
  int64_t step = 0;
  int64_t bytes = 0;
  std::string manifest_sha256;
  double loss = 0;
  std::optional<double> eval_loss;  // the evaluation at this step, when one ran
};

// A start-up phase done (rank 0): "rendezvous", "weights_loaded", "data_ready",
// "first_step"; `seconds` it took, `since_start` seconds since the trainer started.
struct Phase {
  std::string phase;
  double seconds = 0;
  double since_start = 0;
  std::string detail;  // e.g. "token cache hit", "resumed from step 40"
};

// A token cache build's progress, from the rank that builds the entry (about every 2 s
// and once when it is done): `done_bytes` of the dataset's `total_bytes` read. The agent
// takes this event from any rank's stdout, every other event from rank 0's only.
struct Tokenizing {
  std::string path;
  int64_t done_bytes = 0;
  int64_t total_bytes = 0;
};

struct Preempted {
  int64_t step = 0;
  double loss = 0;
};

struct Eval {
  int64_t step = 0;
  double loss = 0;
  double perplexity = 0;
  int64_t tokens = 0;
  // The eval set's name (data.eval[i].name); empty for data.eval_path's, whose line has no
  // "set" key.
  std::string set;
};

// One generation at an evaluation (eval.samples), from rank 0. ParseLine keeps at most
// kSampleTextBytes of each text (cut at a UTF-8 character boundary) and kMaxSampleScores
// scores, so a hostile line stays small.
inline constexpr size_t kSampleTextBytes = 16 << 10;
inline constexpr size_t kMaxSampleScores = 8;
struct Sample {
  int64_t step = 0;
  int32_t index = 0;  // the prompt's position in the samples' prompt list
  std::string prompt;  // as the model saw it (chat template applied)
  std::string text;    // what the model wrote
  int64_t tokens = 0;  // new tokens generated
  std::string stop_reason;  // "eos", "stop" or "length"
  std::string reference;    // empty when the prompt has none
  std::vector<std::pair<std::string, double>> scores;  // e.g. {"exact_match", 1.0}
};

// Early stopping ended training after `step`; the run then finishes (export, "finished").
struct StoppedEarly {
  int64_t step = 0;
  int64_t best_step = 0;  // the evaluation with the lowest eval loss
  double best_loss = 0;
  std::string reason;     // "stopped early at step N: eval loss did not improve by ..."
};

struct Finished {
  int64_t steps = 0;
  double loss = 0;
  std::string export_dir;
};

// How the run ended; the last line the trainer prints.
struct Exit {
  absl::StatusCode code = absl::StatusCode::kUnknown;
  std::string message;
  static Exit From(const absl::Status& status) {
    return Exit{status.code(), std::string(status.message())};
  }
};

// A rank's liveness and progress: steps completed, collective waits entered so far (the
// sequence number of the one it waits in while `in_collective`), and seconds since it
// started spent outside (`busy_s`) and inside (`wait_s`) collective waits. A rank that stops
// printing these (SIGSTOP, a wedged process) is one its peers may be waiting for.
struct Progress {
  int64_t step = 0;
  int64_t collectives = 0;
  bool in_collective = false;
  double busy_s = 0;
  double wait_s = 0;
};

using Event =
    std::variant<Started, Metrics, Resumed, CheckpointSaved, Phase, Preempted, Eval, StoppedEarly, Finished, Exit,
                 Tokenizing, Progress, Sample>;

// One JSON line (no trailing newline).
std::string ToLine(const Started& e);
std::string ToLine(const Metrics& e);
std::string ToLine(const Resumed& e);
std::string ToLine(const CheckpointSaved& e);
std::string ToLine(const Phase& e);
std::string ToLine(const Tokenizing& e);
std::string ToLine(const Preempted& e);
std::string ToLine(const Eval& e);
std::string ToLine(const StoppedEarly& e);
std::string ToLine(const Finished& e);
std::string ToLine(const Exit& e);
std::string ToLine(const Progress& e);
std::string ToLine(const Sample& e);

// The event a stdout line carries; nullopt for anything else (plain text, other JSON,
// malformed JSON). Missing or mistyped fields read as their defaults: a line comes from a
// process that may have been cut off mid-write. An unknown code name reads as kUnknown.
std::optional<Event> ParseLine(std::string_view line);

// "INVALID_ARGUMENT" → kInvalidArgument; nullopt for a name that is not a canonical code.
std::optional<absl::StatusCode> StatusCodeFromName(std::string_view name);

// The other direction: the checkpoints the agent offers the trainer to resume from (the
// job's recorded checkpoints, newest first), written to a file passed as
// `--resume-candidates FILE`: a JSON array of {path, step, manifest_sha256}.
struct ResumeCandidate {
  std::string path;
  int64_t step = 0;
  std::string manifest_sha256;  // as recorded from the checkpoint_saved event
};
std::string CandidatesToJson(const std::vector<ResumeCandidate>& candidates);
// INVALID_ARGUMENT naming the entry for anything but an array of objects with a path.
absl::StatusOr<std::vector<ResumeCandidate>> ParseCandidates(std::string_view text);

}  // namespace llamafleet::trainer_events

#endif  // LLAMAFLEET_WORKER_TRAINER_EVENTS_H_
