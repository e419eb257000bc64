// WorkerAgent's handling of its trainers' output lines (agent.h): each line goes into the
// log batches sent to the coordinator, and the event lines (worker/trainer_events.h) also
// become the structured messages the coordinator records (metrics, evaluations,
// checkpoints, start-up phases, token cache progress, early stops, samples).
#include <optional>
#include <string>
#include <variant>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "google/protobuf/util/time_util.h"
#include "worker/agent.h"
#include "worker/trainer_events.h"

namespace llamafleet::worker {
namespace {

using google::protobuf::util::TimeUtil;

constexpr int kLinesPerBatch = 200;
// A token cache build's progress goes to the coordinator at most this often per task.
constexpr absl::Duration kTokenizingRelayInterval = absl::Seconds(5);

// The message a rank-0 event line becomes when its translation needs no worker state
// (metrics, start, tokenizing progress do): nullopt for other events.
std::optional<v1::WorkerMessage> StatelessMessage(const std::string& task_id,
                                                  const trainer_events::Event& event) {
  v1::WorkerMessage m;
  if (const auto* x = std::get_if<trainer_events::Phase>(&event)) {
    v1::StartupPhase* p = m.mutable_phase();
    p->set_task_id(task_id);
    p->set_phase(x->phase.substr(0, 64));
    p->set_seconds(x->seconds);
    p->set_since_start(x->since_start);
    p->set_detail(x->detail.substr(0, 256));
  } else if (const auto* x = std::get_if<trainer_events::Eval>(&event)) {
    v1::EvalResult* e = m.mutable_eval();
    e->set_task_id(task_id);
    e->set_step(x->step);
    e->set_loss(x->loss);
    e->set_perplexity(x->perplexity);
    e->set_tokens(x->tokens);
    e->set_set(x->set);
  } else if (const auto* x = std::get_if<trainer_events::CheckpointSaved>(&event)) {
    v1::CheckpointReport* c = m.mutable_checkpoint();
    c->set_task_id(task_id);
    c->set_step(x->step);
    c->set_path(x->path);
    c->set_bytes(x->bytes);
    c->set_manifest_sha256(x->manifest_sha256);
    c->set_loss(x->loss);
    if (x->eval_loss.has_value()) c->set_eval_loss(*x->eval_loss);
  } else if (const auto* x = std::get_if<trainer_events::StoppedEarly>(&event)) {
    v1::EarlyStop* e = m.mutable_early_stop();
    e->set_task_id(task_id);
    e->set_step(x->step);
    e->set_best_step(x->best_step);
    e->set_best_loss(x->best_loss);
    e->set_reason(x->reason.substr(0, 512));
  } else if (const auto* x = std::get_if<trainer_events::Sample>(&event)) {
    // ParseLine already bounded the texts and scores.
    v1::SampleReport* r = m.mutable_sample();
    r->set_task_id(task_id);
    v1::Sample* s = r->mutable_sample();
    s->set_step(x->step);
    s->set_index(x->index);
    s->set_prompt(x->prompt);
    s->set_text(x->text);
    s->set_tokens(x->tokens);
    s->set_stop_reason(x->stop_reason);
    s->set_reference(x->reference);
    for (const auto& [name, value] : x->scores) (*s->mutable_scores())[name] = value;
  } else {
    return std::nullopt;
  }
  return m;
}

}  // namespace

std::optional<v1::WorkerMessage> WorkerAgent::StructuredMessage(
    const std::string& task_id, const trainer_events::Event& event) {
  if (const auto* x = std::get_if<trainer_events::Metrics>(&event)) {
    v1::WorkerMessage m;
    v1::TrainMetrics* t = m.mutable_metrics();
    t->set_task_id(task_id);
    t->set_step(x->step);
    t->set_epoch(static_cast<int32_t>(x->epoch));
    t->set_loss(x->loss);
    t->set_lr(x->lr);
    t->set_grad_norm(x->grad_norm);
    t->set_tokens_per_second(x->tokens_per_s);
    t->set_tflops(x->tflops);
    t->set_mfu(x->mfu.value_or(0.0));
    t->set_peak_memory_bytes(x->peak_mem_bytes);
    if (x->dpo.has_value()) {
      v1::DpoRewards* d = t->mutable_dpo();
      d->set_chosen(x->dpo->rewards_chosen);
      d->set_rejected(x->dpo->rewards_rejected);
      d->set_accuracy(x->dpo->rewards_accuracies);
      d->set_margin(x->dpo->rewards_margins);
    }
    *t->mutable_time() = TimeUtil::GetCurrentTime();
    std::lock_guard<std::mutex> lock(mu_);
    t->set_total_steps(total_steps_[task_id]);
    return m;
  }
  if (const auto* x = std::get_if<trainer_events::Started>(&event)) {
    std::lock_guard<std::mutex> lock(mu_);
    total_steps_[task_id] = x->total_steps;
    return std::nullopt;
  }
  if (const auto* x = std::get_if<trainer_events::Tokenizing>(&event)) {
    const absl::Time now = absl::Now();
    const bool finished = x->total_bytes > 0 && x->done_bytes >= x->total_bytes;
    std::lock_guard<std::mutex> lock(mu_);
    auto last =
        last_tokenizing_.try_emplace(task_id, TokenizingRelayed{absl::InfinitePast(), ""}).first;
    if ((!finished || last->second.finished_path == x->path) &&
        now - last->second.time < kTokenizingRelayInterval) {
      return std::nullopt;
    }
    last->second.time = now;
    if (finished) last->second.finished_path = x->path;
    v1::WorkerMessage m;
    v1::TokenizingProgress* p = m.mutable_tokenizing();
    p->set_task_id(task_id);
    p->set_path(x->path.substr(0, 256));
    p->set_done_bytes(x->done_bytes);
    p->set_total_bytes(x->total_bytes);
    return m;
  }
  return StatelessMessage(task_id, event);
}

void WorkerAgent::BufferLogLine(const std::string& task_id, int rank, bool is_stderr,
                                const std::string& line) {
  if (buffered_log_lines_ >= options_.max_buffered_log_lines) {
    ++dropped_[{task_id, rank}];  // never stall a rank on a slow coordinator
    return;
  }
  const char* stream = is_stderr ? "stderr" : "stdout";
  if (logs_.empty() || logs_.back().task_id() != task_id || logs_.back().rank() != rank ||
      logs_.back().stream() != stream || logs_.back().lines_size() >= kLinesPerBatch) {
    v1::LogLines batch;
    batch.set_task_id(task_id);
    batch.set_rank(rank);
    batch.set_stream(stream);
    auto it = dropped_.find({task_id, rank});
    if (it != dropped_.end()) {
      batch.set_dropped(it->second);
      dropped_.erase(it);
    }
    logs_.push_back(std::move(batch));
  }
  logs_.back().add_lines(line);
  ++buffered_log_lines_;
}

void WorkerAgent::OnLine(const std::string& task_id, int rank, bool is_stderr,
                         const std::string& line) {
  std::optional<trainer_events::Event> event;
  if (!is_stderr && !line.empty() && line[0] == '{' &&
      absl::StrContains(line, "\"type\":\"progress\"")) {
    // Every rank's liveness, about once a second: kept for heartbeats, never logged.
    event = trainer_events::ParseLine(line);
    if (event.has_value() && std::holds_alternative<trainer_events::Progress>(*event)) {
      rank_progress_.Record(task_id, rank, std::get<trainer_events::Progress>(*event), absl::Now());
      return;
    }
    event.reset();
  }
  if (rank == 0 && !is_stderr) {
    event = trainer_events::ParseLine(line);
  } else if (!is_stderr && absl::StrContains(line, "\"event\":\"tokenizing\"")) {
    // Whichever rank builds a token cache entry reports its progress; from the other
    // ranks nothing else is taken.
    event = trainer_events::ParseLine(line);
    if (event.has_value() && !std::holds_alternative<trainer_events::Tokenizing>(*event))
      event.reset();
  }
  std::optional<v1::WorkerMessage> structured;
  if (event.has_value()) structured = StructuredMessage(task_id, *event);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (structured.has_value()) reliable_.push_back(std::move(*structured));
    BufferLogLine(task_id, rank, is_stderr, line);
  }
  cv_.notify_all();
}

}  // namespace llamafleet::worker
