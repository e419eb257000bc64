#include "worker/trainer_events.h"

#include <algorithm>
#include <cstdint>

#include "common/utf8.h"
#include "nlohmann/json.hpp"

namespace llamafleet::trainer_events {
namespace {

using nlohmann::json;

json EventObject(const char* name) { return json{{"type", "event"}, {"event", name}}; }

// Field readers that never throw: a wrong type reads as the default.
std::string Str(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}
// An integer outside int64 (a float beyond it, NaN, an unsigned above INT64_MAX) reads
// as the default too: converting it would be undefined.
int64_t Int(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return 0;
  if (it->is_number_float()) {
    const double d = it->get<double>();
    return d >= -9.2e18 && d <= 9.2e18 ? static_cast<int64_t>(d) : 0;
  }
  if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) return 0;
  return it->get<int64_t>();
}
double Num(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

}  // namespace

std::optional<absl::StatusCode> StatusCodeFromName(std::string_view name) {
  for (int c = 0; c <= 16; ++c) {
    const auto code = static_cast<absl::StatusCode>(c);
    if (absl::StatusCodeToString(code) == name) return code;
  }
  return std::nullopt;
}

std::string ToLine(const Started& e) {
  json j = EventObject("started");
  j["world_size"] = e.world_size;
  j["parameters"] = e.parameters;
  j["total_steps"] = e.total_steps;
  j["steps_per_epoch"] = e.steps_per_epoch;
  j["train_rows"] = e.train_rows;
  j["seq_len"] = e.seq_len;
  j["global_batch"] = e.global_batch;
  j["grad_accum"] = e.grad_accum;
  j["trainable_parameters"] = e.trainable_parameters;
  const sched::MemoryEstimate& m = e.memory_estimate;
  j["memory_estimate"] = json{{"total_bytes", m.total},
                              {"parameters_bytes", m.parameters},
                              {"gradients_bytes", m.gradients},
                              {"optimizer_state_bytes", m.optimizer_state},
                              {"gathered_params_bytes", m.gathered_params},
                              {"activations_bytes", m.activations},
                              {"communication_bytes", m.communication},
                              {"workspace_bytes", m.workspace},
                              {"checkpoint_staging_bytes", m.checkpoint_staging},
                              {"peak_phase", m.peak_phase}};
  return j.dump();
}

std::string ToLine(const Metrics& e) {
  json j = {{"type", "metrics"},          {"step", e.step},
            {"epoch", e.epoch},           {"loss", e.loss},
            {"lr", e.lr},                 {"grad_norm", e.grad_norm},
            {"tokens", e.tokens},         {"tokens_per_s", e.tokens_per_s},
            {"tflops", e.tflops},         {"peak_mem_bytes", e.peak_mem_bytes}};
  j["mfu"] = e.mfu.has_value() ? json(*e.mfu) : json(nullptr);
  if (e.dpo.has_value()) {
    j["rewards_chosen"] = e.dpo->rewards_chosen;
    j["rewards_rejected"] = e.dpo->rewards_rejected;
    j["rewards_accuracies"] = e.dpo->rewards_accuracies;
    j["rewards_margins"] = e.dpo->rewards_margins;
  }
  return j.dump();
}

std::string ToLine(const Phase& e) {
  json j = EventObject("phase");
  j["phase"] = e.phase;
  j["seconds"] = e.seconds;
  j["since_start"] = e.since_start;
  j["detail"] = e.detail;
  return j.dump();
}

std::string ToLine(const Tokenizing& e) {
  json j = EventObject("tokenizing");
  j["path"] = e.path;
  j["done_bytes"] = e.done_bytes;
  j["total_bytes"] = e.total_bytes;
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string ToLine(const Resumed& e) {
  json j = EventObject("resumed");
  j["path"] = e.path;
  j["step"] = e.step;
  j["skipped"] = json::array();
  for (const Resumed::Skipped& s : e.skipped) j["skipped"].push_back({{"path", s.path}, {"reason", s.reason}});
  return j.dump();
}

std::string ToLine(const CheckpointSaved& e) {
  json j = EventObject("checkpoint_saved");
  j["path"] = e.path;
  j["step"] = e.step;
  j["bytes"] = e.bytes;
  j["manifest_sha256"] = e.manifest_sha256;
  j["loss"] = e.loss;
  if (e.eval_loss.has_value()) j["eval_loss"] = *e.eval_loss;
  return j.dump();
}

std::string ToLine(const Preempted& e) {
  json j = EventObject("preempted");
  j["step"] = e.step;
  j["loss"] = e.loss;
  return j.dump();
}

std::string ToLine(const Eval& e) {
  json j{{"type", "eval"},
         {"step", e.step},
         {"loss", e.loss},
         {"perplexity", e.perplexity},
         {"tokens", e.tokens}};
  if (!e.set.empty()) j["set"] = e.set;
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string ToLine(const StoppedEarly& e) {
  json j = EventObject("stopped_early");
  j["step"] = e.step;
  j["best_step"] = e.best_step;
  j["best_loss"] = e.best_loss;
  j["reason"] = e.reason;
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string ToLine(const Finished& e) {
  json j = EventObject("finished");
  j["steps"] = e.steps;
  j["loss"] = e.loss;
  j["export_dir"] = e.export_dir;
  return j.dump();
}

std::string ToLine(const Exit& e) {
  json j = EventObject("exit");
  j["code"] = absl::StatusCodeToString(e.code);
  // Invalid UTF-8 in a message (a path, an OS error) must not make dump() throw.
  j["message"] = e.message;
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string ToLine(const Progress& e) {
  return json{{"type", "progress"},
              {"step", e.step},
              {"collectives", e.collectives},
              {"in_collective", e.in_collective},
              {"busy_s", e.busy_s},
              {"wait_s", e.wait_s}}
      .dump();
}

std::string ToLine(const Sample& e) {
  json j{{"type", "sample"},   {"step", e.step},         {"index", e.index},
         {"prompt", e.prompt}, {"text", e.text},         {"tokens", e.tokens},
         {"stop_reason", e.stop_reason}};
  if (!e.reference.empty()) j["reference"] = e.reference;
  if (!e.scores.empty()) {
    json scores = json::object();
    for (const auto& [name, value] : e.scores) scores[name] = value;
    j["scores"] = scores;
  }
  // Model output is any bytes: invalid UTF-8 must not make dump() throw.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

namespace {

// At most `limit` bytes of `s`, never ending inside a UTF-8 character.
std::string Utf8Prefix(std::string s, size_t limit) {
  s.resize(Utf8PrefixLength(s, limit));
  return s;
}

Sample ParseSample(const json& j) {
  Sample e;
  e.step = Int(j, "step");
  e.index = static_cast<int32_t>(std::clamp<int64_t>(Int(j, "index"), 0, INT32_MAX));
  e.prompt = Utf8Prefix(Str(j, "prompt"), kSampleTextBytes);
  e.text = Utf8Prefix(Str(j, "text"), kSampleTextBytes);
  e.tokens = Int(j, "tokens");
  e.stop_reason = Str(j, "stop_reason").substr(0, 16);
  e.reference = Utf8Prefix(Str(j, "reference"), kSampleTextBytes);
  if (auto it = j.find("scores"); it != j.end() && it->is_object()) {
    for (const auto& [name, value] : it->items()) {
      if (e.scores.size() == kMaxSampleScores) break;
      if (value.is_number()) e.scores.emplace_back(Utf8Prefix(name, 32), value.get<double>());
    }
  }
  return e;
}

}  // namespace

std::optional<Event> ParseLine(std::string_view line) {
  if (line.empty() || line.front() != '{') return std::nullopt;
  json j = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  const std::string type = Str(j, "type");
  if (type == "metrics") {
    Metrics m;
    m.step = Int(j, "step");
    m.epoch = Int(j, "epoch");
    m.loss = Num(j, "loss");
    m.lr = Num(j, "lr");
    m.grad_norm = Num(j, "grad_norm");
    m.tokens = Int(j, "tokens");
    m.tokens_per_s = Num(j, "tokens_per_s");
    m.tflops = Num(j, "tflops");
    m.peak_mem_bytes = Int(j, "peak_mem_bytes");
    if (auto it = j.find("mfu"); it != j.end() && it->is_number()) m.mfu = it->get<double>();
    if (auto it = j.find("rewards_chosen"); it != j.end() && it->is_number()) {
      m.dpo = Metrics::Dpo{Num(j, "rewards_chosen"), Num(j, "rewards_rejected"),
                           Num(j, "rewards_accuracies"), Num(j, "rewards_margins")};
    }
    return m;
  }
  if (type == "progress") {
    Progress p;
    p.step = Int(j, "step");
    p.collectives = Int(j, "collectives");
    if (auto it = j.find("in_collective"); it != j.end() && it->is_boolean()) p.in_collective = it->get<bool>();
    p.busy_s = Num(j, "busy_s");
    p.wait_s = Num(j, "wait_s");
    return p;
  }
  if (type == "eval") {
    // A set name is a metric tag (validated at submission); bounded here like any line's text.
    return trainer_events::Eval{Int(j, "step"), Num(j, "loss"), Num(j, "perplexity"),
                                Int(j, "tokens"), Str(j, "set").substr(0, 64)};
  }
  if (type == "sample") return ParseSample(j);
  if (type != "event") return std::nullopt;
  const std::string event = Str(j, "event");
  if (event == "started") {
    Started s;
    s.world_size = static_cast<int>(Int(j, "world_size"));
    s.parameters = Int(j, "parameters");
    s.total_steps = Int(j, "total_steps");
    s.steps_per_epoch = Int(j, "steps_per_epoch");
    s.train_rows = Int(j, "train_rows");
    s.seq_len = Int(j, "seq_len");
    s.global_batch = Int(j, "global_batch");
    s.grad_accum = Int(j, "grad_accum");
    s.trainable_parameters = Int(j, "trainable_parameters");
    if (auto it = j.find("memory_estimate"); it != j.end() && it->is_object()) {
      sched::MemoryEstimate& m = s.memory_estimate;
      m.total = Int(*it, "total_bytes");
      m.parameters = Int(*it, "parameters_bytes");
      m.gradients = Int(*it, "gradients_bytes");
      m.optimizer_state = Int(*it, "optimizer_state_bytes");
      m.gathered_params = Int(*it, "gathered_params_bytes");
      m.activations = Int(*it, "activations_bytes");
      m.communication = Int(*it, "communication_bytes");
      m.workspace = Int(*it, "workspace_bytes");
      m.checkpoint_staging = Int(*it, "checkpoint_staging_bytes");
      m.peak_phase = Str(*it, "peak_phase");
    }
    return s;
  }
  if (event == "phase") {
    Phase p;
    p.phase = Str(j, "phase");
    p.seconds = Num(j, "seconds");
    p.since_start = Num(j, "since_start");
    p.detail = Str(j, "detail");
    return p;
  }
  if (event == "tokenizing") return Tokenizing{Str(j, "path"), Int(j, "done_bytes"), Int(j, "total_bytes")};
  if (event == "resumed") {
    Resumed r;
    r.path = Str(j, "path");
    r.step = Int(j, "step");
    if (auto it = j.find("skipped"); it != j.end() && it->is_array()) {
      for (const json& s : *it) {
        if (s.is_object()) r.skipped.push_back({Str(s, "path"), Str(s, "reason")});
      }
    }
    return r;
  }
  if (event == "checkpoint_saved") {
    CheckpointSaved c{Str(j, "path"), Int(j, "step"), Int(j, "bytes"), Str(j, "manifest_sha256"),
                      Num(j, "loss"), std::nullopt};
    if (auto it = j.find("eval_loss"); it != j.end() && it->is_number()) c.eval_loss = it->get<double>();
    return c;
  }
  if (event == "stopped_early") {
    return StoppedEarly{Int(j, "step"), Int(j, "best_step"), Num(j, "best_loss"), Str(j, "reason")};
  }
  if (event == "preempted") return Preempted{Int(j, "step"), Num(j, "loss")};
  if (event == "finished") return Finished{Int(j, "steps"), Num(j, "loss"), Str(j, "export_dir")};
  if (event == "exit" || event == "error") {
    Exit e;
    e.code = StatusCodeFromName(Str(j, "code")).value_or(absl::StatusCode::kUnknown);
    e.message = Str(j, "message");
    return e;
  }
  return std::nullopt;
}

std::string CandidatesToJson(const std::vector<ResumeCandidate>& candidates) {
  json a = json::array();
  for (const ResumeCandidate& c : candidates) {
    a.push_back({{"path", c.path}, {"step", c.step}, {"manifest_sha256", c.manifest_sha256}});
  }
  return a.dump(-1, ' ', false, json::error_handler_t::replace);
}

absl::StatusOr<std::vector<ResumeCandidate>> ParseCandidates(std::string_view text) {
  json a = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (!a.is_array()) return absl::InvalidArgumentError("resume candidates: not a JSON array");
  std::vector<ResumeCandidate> out;
  for (size_t i = 0; i < a.size(); ++i) {
    const json& c = a[i];
    if (!c.is_object() || Str(c, "path").empty()) {
      return absl::InvalidArgumentError("resume candidates[" + std::to_string(i) + "]: needs a path");
    }
    out.push_back({Str(c, "path"), Int(c, "step"), Str(c, "manifest_sha256")});
  }
  return out;
}

}  // namespace llamafleet::trainer_events
