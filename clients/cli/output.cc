#include "clients/cli/output.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "clients/cli/evaluation_line.h"
#include "clients/cli/sample_output.h"
#include "clients/cli/usage_output.h"
#include "common/gpu_throttle.h"
#include "jobspec/job_kind.h"
#include "jobspec/jobspec.h"

namespace llamafleet::cli {
namespace {

// A table column wider than this pushes the reason off a normal terminal.
constexpr size_t kReasonWidth = 60;

absl::Time ToTime(const google::protobuf::Timestamp& t) {
  return absl::FromUnixSeconds(t.seconds()) + absl::Nanoseconds(t.nanos());
}

bool IsSet(const google::protobuf::Timestamp& t) { return t.seconds() != 0 || t.nanos() != 0; }

std::string Shorten(const std::string& s, size_t width) {
  if (s.size() <= width) return s;
  return absl::StrCat(s.substr(0, width - 3), "...");
}

// Table cells must stay on one line whatever a reason contains.
std::string OneLine(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  std::replace(s.begin(), s.end(), '\t', ' ');
  return s;
}

std::string OrDash(const std::string& s) { return s.empty() ? "-" : s; }

// A reason's lines as the table cell of describe's Reason field and the rows under it
// (first cell empty), as written (a data file's bad-lines list stays a list), at most
// kReasonLines of them; "-" when there is none.
constexpr size_t kReasonLines = 25;
void AppendReasonRows(const std::string& reason, std::vector<std::vector<std::string>>& rows) {
  std::vector<std::string> lines = absl::StrSplit(absl::StripTrailingAsciiWhitespace(reason), '\n');
  const size_t shown = std::min(lines.size(), kReasonLines);
  rows.push_back({"Reason:", OrDash(OneLine(lines[0]))});
  for (size_t i = 1; i < shown; ++i) rows.push_back({"", OneLine(lines[i])});
  if (lines.size() > shown) {
    rows.push_back({"", absl::StrCat("... ", lines.size() - shown,
                                     " more lines (-o json has the whole reason)")});
  }
}

// A table cell's view of a reason of several lines: its first line and how many follow.
std::string FirstLine(const std::string& reason) {
  std::vector<absl::string_view> lines =
      absl::StrSplit(absl::StripTrailingAsciiWhitespace(reason), '\n');
  if (lines.size() <= 1) return OneLine(reason);
  return absl::StrCat(OneLine(std::string(lines[0])), " (+", lines.size() - 1, " lines)");
}

std::string ModelName(const v1::ModelSpec& model) {
  return model.preset().empty() ? OrDash(model.path()) : model.preset();
}

// "2026-11-30T01:02:03Z (in 5m)" or "(5m ago)"; "-" when unset.
std::string TimeWithDistance(const google::protobuf::Timestamp& time, absl::Time now) {
  if (!IsSet(time)) return "-";
  const absl::Duration d = ToTime(time) - now;
  if (d >= absl::ZeroDuration()) return absl::StrCat(FormatTime(time), " (in ", FormatEta(d), ")");
  return absl::StrCat(FormatTime(time), " (", FormatAge(time, now), " ago)");
}

// Loss with four decimals (nan and inf as such: a diverged run should say so).
std::string FormatLoss(double loss) {
  if (!std::isfinite(loss)) return absl::StrCat(loss);
  return absl::StrFormat("%.4f", loss);
}

std::string WorkerStateName(v1::WorkerState state) {
  std::string name = v1::WorkerState_Name(state);
  absl::string_view short_name = name;
  absl::ConsumePrefix(&short_name, "WORKER_");
  if (state == v1::WORKER_STATE_UNSPECIFIED) return "-";
  return std::string(short_name);
}

// What a worker's GPU samples say is wrong now: "GPU 0 gone; GPU 3 throttled: hw_thermal"
// (common/gpu_throttle.h); "" when nothing is.
std::string GpuHealthNote(const v1::WorkerInfo& w) {
  std::vector<std::string> notes;
  for (const v1::GpuSample& g : w.gpus()) {
    if (g.gone()) {
      notes.push_back(absl::StrCat("GPU ", g.index(), " gone"));
    } else if (GpuHealthThrottleMask(g.clock_throttle_reasons()) != 0) {
      notes.push_back(absl::StrCat("GPU ", g.index(), " throttled: ",
                                   absl::StrJoin(GpuHealthThrottleNames(g.clock_throttle_reasons()), ",")));
    }
  }
  return absl::StrJoin(notes, "; ");
}

// A worker's state; a drained one's with its source, age and reason ("DRAINING (operator
// 5m: bad DIMM)"), another's with what its GPUs show ("READY (GPU 0 throttled:
// hw_thermal)"), shortened like reasons.
std::string WorkerStateCell(const v1::WorkerInfo& w, absl::Time now) {
  std::string state = WorkerStateName(w.state());
  if (!w.has_drain()) {
    const std::string note = GpuHealthNote(w);
    return note.empty() ? state : absl::StrCat(state, " (", Shorten(note, kReasonWidth), ")");
  }
  return absl::StrCat(state, " (", w.drain().source(), " ", FormatAge(w.drain().since(), now), ": ",
                      Shorten(w.drain().reason(), kReasonWidth), ")");
}

// "3" GPUs or CPU ranks a worker offers.
int WorkerSlots(const v1::WorkerInfo& worker) {
  const v1::Inventory& inv = worker.inventory();
  return inv.gpus_size() > 0 ? inv.gpus_size() : inv.cpu_ranks();
}

std::string GpuModels(const v1::Inventory& inv) {
  if (inv.gpus_size() == 0) return "cpu";
  std::set<std::string> models;
  for (const v1::Gpu& gpu : inv.gpus()) models.insert(OrDash(gpu.model()));
  return absl::StrJoin(models, ",");
}

std::string Labels(const google::protobuf::Map<std::string, std::string>& labels) {
  // Map order is unspecified; sort so the output is stable.
  std::set<std::string> pairs;
  for (const auto& [k, v] : labels) pairs.insert(absl::StrCat(k, "=", v));
  return OrDash(absl::StrJoin(pairs, ","));
}

}  // namespace

std::string FormatCount(int64_t n) {
  // -(n + 1) + 1 stays in range for INT64_MIN.
  const uint64_t magnitude = n < 0 ? static_cast<uint64_t>(-(n + 1)) + 1 : static_cast<uint64_t>(n);
  const std::string digits = absl::StrCat(magnitude);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? absl::StrCat("-", out) : out;
}

std::string FormatEta(absl::Duration d) {
  // Rounded up: "0s" would claim it is done.
  const int64_t s = std::max<int64_t>(0, absl::ToInt64Seconds(absl::Ceil(d, absl::Seconds(1))));
  if (s < 60) return absl::StrCat(s, "s");
  if (s < 3600) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  if (s < 86400) return absl::StrFormat("%dh%02dm", s / 3600, (s % 3600) / 60);
  return absl::StrFormat("%dd%02dh", s / 86400, (s % 86400) / 3600);
}

std::string JobReason(const v1::Job& job) {
  if (job.state() == v1::QUEUED && !job.pending().message().empty()) {
    return OneLine(job.pending().message());
  }
  return OneLine(job.status_reason());
}

std::string FormatTable(const std::vector<std::vector<std::string>>& raw_rows) {
  // Every cell is escaped first: what was measured is what is printed, one line per row.
  std::vector<std::vector<std::string>> rows;
  rows.reserve(raw_rows.size());
  for (const auto& raw : raw_rows) {
    std::vector<std::string>& row = rows.emplace_back();
    row.reserve(raw.size());
    for (const std::string& cell : raw) row.push_back(EscapeTableCell(cell));
  }
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(widths[i] - row[i].size() + 3, ' ');
    }
    absl::StrAppend(&out, absl::StripTrailingAsciiWhitespace(line), "\n");
  }
  return out;
}

std::string StateName(v1::JobState state) {
  return state == v1::JOB_STATE_UNSPECIFIED ? "-" : v1::JobState_Name(state);
}

std::string FormatTime(const google::protobuf::Timestamp& time) {
  if (!IsSet(time)) return "-";
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", ToTime(time), absl::UTCTimeZone());
}

std::string FormatAge(const google::protobuf::Timestamp& time, absl::Time now) {
  if (!IsSet(time)) return "-";
  const int64_t seconds = std::max<int64_t>(0, absl::ToInt64Seconds(now - ToTime(time)));
  if (seconds < 120) return absl::StrCat(seconds, "s");
  if (seconds < 120 * 60) return absl::StrCat(seconds / 60, "m");
  if (seconds < 48 * 3600) return absl::StrCat(seconds / 3600, "h");
  return absl::StrCat(seconds / 86400, "d");
}

namespace {

// "40/100" (steps done / total) from the latest metrics; "-" before the first.
std::string JobStep(const v1::Job& job) {
  const v1::JobMetricsPoint& m = job.latest_metrics();
  if (!job.has_latest_metrics() || m.step() <= 0) return "-";
  return m.total_steps() > 0 ? absl::StrCat(m.step(), "/", m.total_steps()) : absl::StrCat(m.step());
}

// The parameters the jobs' sweep points set ("training.lr"), in first-seen order, at most
// kMaxSweptColumns.
constexpr size_t kMaxSweptColumns = 8;
std::vector<std::string> SweptParameters(const std::vector<v1::Job>& jobs) {
  std::vector<std::string> names;
  for (const v1::Job& job : jobs) {
    for (const std::string& value : job.spec().sweep().point().values()) {
      const std::string name = value.substr(0, value.find('='));
      if (std::find(names.begin(), names.end(), name) == names.end() &&
          names.size() < kMaxSweptColumns) {
        names.push_back(name);
      }
    }
  }
  return names;
}

// `job`'s value of the swept parameter `name`, "-" where its point does not set it.
std::string SweptValue(const v1::Job& job, const std::string& name) {
  for (const std::string& value : job.spec().sweep().point().values()) {
    if (absl::StartsWith(value, name + "=")) return value.substr(name.size() + 1);
  }
  return "-";
}

}  // namespace

std::string JobsTable(const std::vector<v1::Job>& jobs, bool wide, absl::Time now, Device device) {
  std::vector<std::vector<std::string>> rows;
  // -o wide of a sweep's points: a column per swept parameter, after the name.
  const std::vector<std::string> swept = wide ? SweptParameters(jobs) : std::vector<std::string>{};
  if (wide) {
    rows.push_back({"ID", "NAME"});
    for (const std::string& name : swept) rows.back().push_back(absl::AsciiStrToUpper(name));
    for (const char* column :
         {"OWNER", "QUEUE", "PRIORITY", "STATE", "NODES", "GPUS/NODE", "MODEL", "SHARDING",
          "ATTEMPTS", "STEP", "LOSS", "EVAL-LOSS", device == Device::kCpu ? "CPU-H" : "GPU-H",
          "COST", "CREATED", "AGE", "POSITION", "EST-START", "REASON"}) {
      rows.back().push_back(column);
    }
  } else {
    rows.push_back({"ID", "NAME", "OWNER", "QUEUE", "PRIORITY", "STATE", "AGE", "REASON"});
  }
  for (const v1::Job& job : jobs) {
    const v1::JobSpec& spec = job.spec();
    const std::string reason = JobReason(job);
    const bool pending = job.state() == v1::QUEUED && job.has_pending();
    if (wide) {
      rows.push_back(
          {job.id(), spec.name(), job.owner(), spec.queue(), absl::StrCat(spec.priority()),
           StateName(job.state()), absl::StrCat(spec.resources().nodes()),
           absl::StrCat(spec.resources().gpus_per_node()), ModelName(spec.model()),
           v1::ShardingStrategy_Name(spec.fsdp().sharding()), absl::StrCat(job.attempts()), JobStep(job),
           job.has_latest_metrics() && job.latest_metrics().step() > 0 ? FormatLoss(job.latest_metrics().loss()) : "-",
           job.latest_metrics().has_eval_loss() ? FormatLoss(job.latest_metrics().eval_loss()) : "-",
           FormatGpuHours(job.usage().gpu_seconds()),
           FormatCost(job.usage().has_cost() ? std::optional<double>(job.usage().cost()) : std::nullopt),
           FormatTime(job.create_time()), FormatAge(job.create_time(), now),
           pending && job.pending().queue_position() > 0
               ? absl::StrCat(job.pending().queue_position())
               : "-",
           pending ? FormatTime(job.pending().estimated_start()) : "-", reason});
      std::vector<std::string>& row = rows.back();
      for (size_t i = 0; i < swept.size(); ++i) {
        row.insert(row.begin() + 2 + static_cast<long>(i), SweptValue(job, swept[i]));
      }
    } else {
      rows.push_back({job.id(), spec.name(), job.owner(), spec.queue(),
                      absl::StrCat(spec.priority()), StateName(job.state()),
                      FormatAge(job.create_time(), now), Shorten(reason, kReasonWidth)});
    }
  }
  return FormatTable(rows);
}

std::string WorkersTable(const std::vector<v1::WorkerInfo>& workers, bool wide, absl::Time now) {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> header = {"NAME", "STATE",    "SLOTS",          "GPU-MODEL",
                                     "EFA",  "INSTANCE", "LAST-HEARTBEAT", "TASKS"};
  if (wide) {
    header.insert(header.end(), {"HOST", "ADDRESS", "CPUS", "MEMORY", "GPU-UTIL", "LABELS"});
  }
  rows.push_back(std::move(header));
  for (const v1::WorkerInfo& w : workers) {
    const v1::Inventory& inv = w.inventory();
    std::string tasks = OrDash(absl::StrJoin(w.running_task_ids(), ","));
    if (!wide) tasks = Shorten(tasks, kReasonWidth);
    std::vector<std::string> row = {
        OrDash(w.name()),
        WorkerStateCell(w, now),
        absl::StrCat(w.gpus_allocated(), "/", WorkerSlots(w)),
        GpuModels(inv),
        absl::StrCat(inv.efa_devices()),
        OrDash(inv.instance_type()),
        IsSet(w.last_heartbeat()) ? absl::StrCat(FormatAge(w.last_heartbeat(), now), " ago") : "-",
        tasks};
    if (wide) {
      std::string util = "-";
      if (w.gpus_size() > 0) {
        double sum = 0;
        for (const v1::GpuSample& g : w.gpus()) sum += g.gpu_util();
        util = absl::StrFormat("%.0f%%", sum / w.gpus_size());
      }
      row.insert(row.end(), {OrDash(inv.host()), OrDash(inv.address()),
                             inv.cpus() > 0 ? absl::StrCat(inv.cpus()) : "-",
                             inv.memory_bytes() > 0 ? FormatBytes(inv.memory_bytes()) : "-", util,
                             Labels(inv.labels())});
    }
    rows.push_back(std::move(row));
  }
  return FormatTable(rows);
}

std::string QueuesTable(const std::vector<v1::Queue>& queues, absl::Time now) {
  std::vector<std::vector<std::string>> rows = {
      {"QUEUE", "QUEUED", "RUNNING", "GPUS", "OLDEST-QUEUED"}};
  for (const v1::Queue& q : queues) {
    rows.push_back({q.name(), absl::StrCat(q.queued()), absl::StrCat(q.running()),
                    q.gpu_quota() > 0 ? absl::StrCat(q.gpus_allocated(), "/", q.gpu_quota())
                                      : absl::StrCat(q.gpus_allocated(), "/-"),
                    IsSet(q.oldest_queued_time())
                        ? absl::StrCat(FormatAge(q.oldest_queued_time(), now), " ago")
                        : "-"});
  }
  return FormatTable(rows);
}

std::string CheckpointsTable(const std::vector<v1::Checkpoint>& checkpoints) {
  std::vector<std::vector<std::string>> rows = {
      {"STEP", "ATTEMPT", "LOSS", "EVAL-LOSS", "SIZE", "TIME", "PATH"}};
  for (const v1::Checkpoint& c : checkpoints) {
    rows.push_back({absl::StrCat(c.step()), absl::StrCat(c.attempt()), FormatLoss(c.loss()),
                    c.has_eval_loss() ? FormatLoss(c.eval_loss()) : "-", FormatBytes(c.bytes()),
                    FormatTime(c.time()), OrDash(c.path())});
  }
  return FormatTable(rows);
}

namespace {

// Seconds from the attempt's placement to `phase`, by the coordinator's clock.
double SincePlaced(const v1::Attempt& a, const v1::AttemptPhase& phase) {
  return absl::ToDoubleSeconds(ToTime(phase.time()) - ToTime(a.start_time()));
}

// The STARTUP cell: placement to the first step, or the phase the start has reached.
std::string StartupCell(const v1::Attempt& a) {
  for (const v1::AttemptPhase& p : a.phases()) {
    if (p.name() == "first_step") return absl::StrFormat("%.2f s", SincePlaced(a, p));
  }
  if (a.phases().empty()) return "-";
  return absl::StrCat("at ", OneLine(a.phases(a.phases_size() - 1).name()));
}

}  // namespace

std::string AttemptsTable(const std::vector<v1::Attempt>& attempts, Device device) {
  std::vector<std::vector<std::string>> rows = {
      {"ATTEMPT", "STATE", "NODES", "WORKERS", "STARTED", "ENDED", "STARTUP", "CLASS", "RESIZE",
       device == Device::kCpu ? "CPU-TIME" : "GPU-TIME", "COST", "REASON"}};
  for (const v1::Attempt& a : attempts) {
    std::vector<std::string> workers;
    for (const v1::AttemptTask& t : a.tasks()) workers.push_back(t.worker());
    std::string state = v1::AttemptState_Name(a.state());
    if (absl::StartsWith(state, "ATTEMPT_")) state = state.substr(8);
    rows.push_back({absl::StrCat(a.attempt()), state,
                    absl::StrCat(a.nodes() > 0 ? a.nodes() : a.tasks_size()),
                    OrDash(absl::StrJoin(workers, ",")), FormatTime(a.start_time()),
                    a.has_end_time() ? FormatTime(a.end_time()) : "-", StartupCell(a),
                    OrDash(a.failure_class()), OrDash(OneLine(a.resize_reason())),
                    FormatGpuTime(a.gpu_seconds(), device),
                    FormatCost(a.has_cost() ? std::optional<double>(a.cost()) : std::nullopt),
                    OrDash(FirstLine(a.reason()))});
  }
  return FormatTable(rows);
}

std::string AttemptPhasesTable(const v1::Attempt& attempt) {
  std::vector<std::vector<std::string>> rows = {{"PHASE", "AT", "TOOK", "DETAIL"}};
  for (const v1::AttemptPhase& p : attempt.phases()) {
    std::string detail = OneLine(p.detail());
    if (detail.empty() && p.name() == "placed") detail = "time in the queue";
    if (detail.empty() && p.name() == "trainers_started") detail = "every rank running";
    rows.push_back({OneLine(p.name()), absl::StrFormat("+%.2f s", SincePlaced(attempt, p)),
                    absl::StrFormat("%.2f s", p.seconds()), OrDash(detail)});
  }
  return FormatTable(rows);
}

std::string AttemptsSection(const std::vector<v1::Attempt>& attempts, Device device) {
  std::string out = AttemptsTable(attempts, device);
  for (const v1::Attempt& a : attempts) {
    if (a.phases().empty()) continue;
    absl::StrAppend(&out, "Start-up of attempt ", a.attempt(), " (AT: since placed; TOOK: the phase itself):\n",
                    Indent(AttemptPhasesTable(a), 2));
  }
  return out;
}

std::string EventLine(const v1::JobEvent& event) {
  // An event within a state (a start-up phase, a checkpoint) is no transition.
  std::string line =
      event.from_state() == event.to_state()
          ? absl::StrCat(event.seq(), " ", FormatTime(event.time()), " ",
                         StateName(event.to_state()))
          : absl::StrCat(event.seq(), " ", FormatTime(event.time()), " ",
                         StateName(event.from_state()), " -> ", StateName(event.to_state()));
  if (!event.reason().empty()) absl::StrAppend(&line, " ", OneLine(event.reason()));
  return line;
}

std::string JobStateLine(const v1::Job& job) {
  std::string line =
      absl::StrCat("job ", job.id(), " (", job.spec().name(), ") is ", StateName(job.state()));
  const std::string reason = JobReason(job);
  if (!reason.empty()) absl::StrAppend(&line, ": ", reason);
  return line;
}

std::string Indent(const std::string& text, int spaces) {
  const std::string pad(spaces, ' ');
  std::string out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!line.empty()) absl::StrAppend(&out, pad, line);
    absl::StrAppend(&out, "\n");
  }
  // StrSplit yields an empty last piece after a trailing newline; do not double it.
  if (!text.empty() && text.back() == '\n') out.pop_back();
  return out;
}

namespace {

// describe's "Latest metrics" section: the job's latest metrics point, each named eval
// set's latest evaluation and DPO's rewards ("" when the job has reported no metrics).
std::string LatestMetricsSection(const v1::Job& job, absl::Time now, const std::vector<v1::EvalPoint>& evals) {
  if (!job.has_latest_metrics()) return "";
  const v1::JobSpec& spec = job.spec();
  const v1::JobMetricsPoint& m = job.latest_metrics();
  std::vector<std::vector<std::string>> metrics = {
      {"Step:", m.total_steps() > 0 ? absl::StrCat(m.step(), "/", m.total_steps())
                                    : absl::StrCat(m.step())},
      {"Attempt:", absl::StrCat(m.attempt())},
      {"Loss:", FormatLoss(m.loss())},
      {"Learning rate:", absl::StrFormat("%.3g", m.lr())},
      {"Tokens/s:", FormatCount(std::llround(m.tokens_per_second()))},
  };
  // An evaluation job trains no step: its metrics are its evaluation's.
  if (IsEvaluateJob(spec)) metrics = {metrics[1]};
  if (m.grad_norm() != 0)
    metrics.push_back({"Grad norm:", absl::StrFormat("%.4g", m.grad_norm())});
  if (m.tflops() != 0) metrics.push_back({"TFLOPS:", absl::StrFormat("%.1f", m.tflops())});
  if (m.mfu() != 0) metrics.push_back({"MFU:", absl::StrFormat("%.1f%%", m.mfu() * 100)});
  if (m.peak_memory_bytes() != 0) {
    metrics.push_back({"Peak memory:", FormatBytes(m.peak_memory_bytes())});
  }
  if (m.has_eval_loss()) {
    metrics.push_back({"Eval loss:", absl::StrCat(FormatLoss(m.eval_loss()), " after step ", m.eval_step(),
                                                  " (best ", FormatLoss(m.best_eval_loss()), ")")});
  }
  // Named eval sets: each one's latest evaluation (the first's is "Eval loss" above).
  for (const v1::EvalSet& set : spec.data().eval()) {
    const v1::EvalPoint* last = nullptr;
    for (const v1::EvalPoint& e : evals) {
      if (e.set() == set.name()) last = &e;
    }
    if (last == nullptr) continue;
    metrics.push_back({absl::StrCat("Eval loss (", set.name(), "):"),
                       absl::StrCat(FormatLoss(last->loss()), " after step ", last->step())});
  }
  if (m.has_dpo()) metrics.push_back({"DPO rewards:", DpoRewardsLine(m.dpo())});
  metrics.push_back({"Reported:", TimeWithDistance(m.time(), now)});
  return absl::StrCat("Latest metrics:\n", Indent(FormatTable(metrics), 2));
}

}  // namespace

std::string DescribeJob(const v1::Job& job, const std::vector<v1::JobEvent>& events,
                        const std::vector<v1::Checkpoint>& checkpoints, absl::Time now,
                        const std::vector<v1::Attempt>& attempts, Device device,
                        const std::vector<v1::EvalPoint>& evals,
                        const std::vector<v1::Sample>& samples) {
  const v1::JobSpec& spec = job.spec();
  std::vector<std::vector<std::string>> fields = {
      {"ID:", job.id()},
      {"Name:", spec.name()},
      {"Owner:", job.owner()},
      {"Queue:", spec.queue()},
      {"Priority:", absl::StrCat(spec.priority())},
      {"State:", StateName(job.state())},
  };
  AppendReasonRows(job.status_reason(), fields);
  const std::vector<std::vector<std::string>> more = {
      {"Created:", absl::StrCat(FormatTime(job.create_time()), " (",
                                FormatAge(job.create_time(), now), " ago)")},
      {"Updated:", FormatTime(job.update_time())},
      {"Attempts:", absl::StrCat(job.attempts())},
      {"Restarts:", spec.run_policy().has_max_restarts()
                        ? absl::StrCat(job.restarts(), " of ", spec.run_policy().max_restarts())
                        : absl::StrCat(job.restarts())},
      {"Workers:", OrDash(absl::StrJoin(job.workers(), ", "))},
      {device == Device::kCpu ? "CPU time:" : "GPU time:", UsageLine(job.usage(), device)},
      {"Idempotency key:", OrDash(job.idempotency_key())},
      {IsEvaluateJob(spec) ? "Evaluation:" : "Finetuning:",
       IsEvaluateJob(spec) ? EvaluationLine(spec) : FinetuningLine(job)},
  };
  fields.insert(fields.end(), more.begin(), more.end());
  if (!job.derived_from().empty()) {
    fields.push_back(
        {"Derived from:", absl::StrCat("job ", job.derived_from(), " (resubmitted from it)")});
  }
  if (const std::string tp = ParallelismLine(spec); !tp.empty()) fields.push_back({"Parallelism:", tp});
  if (const std::string data = DataLine(spec); !data.empty()) fields.push_back({"Data:", data});
  fields.push_back({"Memory estimate:", job.has_memory_estimate()
                                            ? MemoryEstimateLine(job.memory_estimate(), device)
                                            : "- (model shape known only to the trainer)"});
  if (job.has_step_time_estimate())
    fields.push_back({"Step estimate:", StepTimeLine(job.step_time_estimate())});
  std::string out = FormatTable(fields);

  if (job.state() == v1::QUEUED && job.has_pending()) {
    const v1::PendingInfo& p = job.pending();
    std::vector<std::vector<std::string>> pending = {
        {"Code:", OrDash(p.code())},
        {"Message:", OrDash(OneLine(p.message()))},
        {"Queue position:", p.queue_position() > 0
                                ? absl::StrCat(p.queue_position(), " in queue ", spec.queue())
                                : "-"},
        {"Estimated start:",
         IsSet(p.estimated_start()) ? TimeWithDistance(p.estimated_start(), now) : "unknown"},
    };
    absl::StrAppend(&out, "Pending:\n", Indent(FormatTable(pending), 2));
  }

  absl::StrAppend(&out, LatestMetricsSection(job, now, evals));
  absl::StrAppend(&out, SamplesSummary(samples));

  absl::StrAppend(&out, "Checkpoints:\n");
  if (checkpoints.empty()) {
    absl::StrAppend(&out, "  <none>\n");
  } else {
    absl::StrAppend(&out, Indent(CheckpointsTable(checkpoints), 2));
  }
  if (!attempts.empty()) absl::StrAppend(&out, "Attempts:\n", Indent(AttemptsSection(attempts, device), 2));

  absl::StrAppend(&out, "Spec:\n", Indent(MessageToYaml(spec), 2));
  if (out.back() != '\n') out += "\n";
  absl::StrAppend(&out, "Events:\n");
  if (events.empty()) {
    absl::StrAppend(&out, "  <none>\n");
    return out;
  }
  std::vector<std::vector<std::string>> rows = {{"SEQ", "TIME", "TYPE", "FROM", "TO", "REASON"}};
  for (size_t i = 0; i < events.size(); ++i) {
    const v1::JobEvent& e = events[i];
    // Of a run of tokenizing progress events, the last says it all.
    if (e.type() == "tokenizing" && i + 1 < events.size() && events[i + 1].type() == "tokenizing") continue;
    rows.push_back({absl::StrCat(e.seq()), FormatTime(e.time()), e.type(),
                    StateName(e.from_state()), StateName(e.to_state()), FirstLine(e.reason())});
  }
  absl::StrAppend(&out, Indent(FormatTable(rows), 2));
  return out;
}

std::string SpecErrorsForFile(const std::vector<v1::FieldViolation>& violations,
                              const std::vector<std::string>& documents,
                              const std::vector<JobSource>& sources) {
  std::vector<std::string> parts;
  for (const v1::FieldViolation& v : violations) {
    // "spec.F" (one job), "jobs[N].spec.F" or "jobs[N].idempotency_key" (a batch).
    absl::string_view field = v.field();
    int index = 0;
    const bool batch = absl::ConsumePrefix(&field, "jobs[");
    if (batch) {
      const size_t close = field.find("].");
      if (close == absl::string_view::npos || !absl::SimpleAtoi(field.substr(0, close), &index) ||
          index < 0) {
        parts.push_back(absl::StrCat(v.field(), " ", v.description()));
        continue;
      }
      field.remove_prefix(close + 2);
    }
    const bool in_spec = absl::ConsumePrefix(&field, "spec.");
    const std::string rule = absl::StrCat(field, " ", v.description());
    const size_t i = static_cast<size_t>(index);
    // "<file>:<line>: " when the field (or its nearest written parent) is in the file.
    if (const int line = in_spec && i < sources.size() ? sources[i].positions.Find(field).line : 0; line > 0) {
      parts.push_back(absl::StrCat(sources[i].file, ":", line, ": ", rule));
    } else if (!batch) {
      parts.push_back(rule);
    } else if (i < documents.size()) {
      parts.push_back(absl::StrCat(documents[i], ": ", rule));
    } else {
      parts.push_back(absl::StrCat("document ", index + 1, ": ", rule));
    }
  }
  return absl::StrJoin(parts, "; ");
}

}  // namespace llamafleet::cli
