#include "server/cluster_manager.h"

#include <openssl/crypto.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "clients/jobspec/jobspec.h"
#include "google/protobuf/util/time_util.h"
#include "server/metrics.h"
#include "spdlog/spdlog.h"

namespace llamafleet {
namespace {

// An elastic gang placed on another size than its last attempt (or than `nodes` at its
// first start): "resized 3 → 2 nodes: worker w3 lost". "" when the size did not change.
std::string ResizeNote(const SchedulableJob& j, const std::vector<sched::Allocation>& placed,
                       const std::set<std::string>& gone) {
  const int now = static_cast<int>(placed.size());
  const int before = j.job.workers_size() > 0 ? j.job.workers_size() : j.job.spec().resources().nodes();
  if (now == before) return "";
  if (j.job.workers_size() == 0) {
    return absl::StrCat("elastic: started on ", now, " of ", before, " nodes (min_nodes ",
                        j.job.spec().resources().min_nodes(), ")");
  }
  std::vector<std::string> lost;
  for (const std::string& w : j.job.workers()) {
    if (j.excluded_workers.count(w) || gone.count(w)) lost.push_back(w);
  }
  std::string note = absl::StrCat("resized ", before, " \u2192 ", now, " nodes");
  if (!lost.empty()) {
    absl::StrAppend(&note, ": ", lost.size() == 1 ? "worker " : "workers ", absl::StrJoin(lost, ", "), " lost");
  } else if (now < before) {
    absl::StrAppend(&note, ": only ", now, " matching workers free");
  } else {
    absl::StrAppend(&note, ": capacity returned");
  }
  return note;
}

using google::protobuf::util::TimeUtil;

bool TokenMatches(const std::string& expected, const std::string& given) {
  if (expected.empty() || expected.size() != given.size()) return false;
  return CRYPTO_memcmp(expected.data(), given.data(), expected.size()) == 0;
}

bool IsTerminalTask(v1::TaskState s) {
  return s == v1::TASK_SUCCEEDED || s == v1::TASK_FAILED || s == v1::TASK_KILLED;
}

int WorkerSlots(const v1::Inventory& inv) {
  return inv.gpus_size() > 0 ? inv.gpus_size() : inv.cpu_ranks();
}

}  // namespace

AttemptOutcome ClassifyFailure(const v1::TaskStatus& status) {
  bool started = false;
  for (const v1::RankExit& e : status.exits()) {
    const std::string& err = e.last_error();
    if (absl::StartsWith(err, "INVALID_ARGUMENT") || absl::StartsWith(err, "NOT_FOUND") ||
        absl::StartsWith(err, "FAILED_PRECONDITION") || absl::StartsWith(err, "OUT_OF_RANGE")) {
      return AttemptOutcome::kPermanent;
    }
    if (e.exit_code() == 127 || e.exit_code() == 126) continue;  // could not execute the trainer
    started = true;
  }
  if (status.exits_size() > 0 && !started) return AttemptOutcome::kNodeFault;
  if (status.exits_size() == 0) return AttemptOutcome::kNodeFault;  // the worker could not launch it
  return AttemptOutcome::kRetryable;
}

ClusterManager::ClusterManager(JobStore* store, ClusterOptions options)
    : store_(store), options_(std::move(options)), scheduler_(options_.scheduler) {}

absl::StatusOr<std::unique_ptr<ClusterManager>> ClusterManager::Start(JobStore* store,
                                                                      ClusterOptions options) {
  std::unique_ptr<ClusterManager> m(new ClusterManager(store, std::move(options)));
  // Recovery: attempts the database says are active. Their workers get one heartbeat
  // timeout to reconnect and report their tasks.
  absl::StatusOr<std::vector<AttemptRecord>> active = LoadActiveAttempts(*store);
  if (!active.ok()) return active.status();
  const absl::Time now = m->options_.clock->Now();
  for (AttemptRecord& rec : *active) {
    absl::StatusOr<v1::Job> job = store->GetJob(rec.job_id);
    if (!job.ok()) return job.status();
    ActiveAttempt a;
    a.spec = job->spec();
    a.committed = true;
    a.running_recorded = job->state() == v1::RUNNING;
    a.last_progress = now;
    a.master_port = rec.master_port;
    m->ports_in_use_.insert(rec.master_port);
    for (const TaskRecord& t : rec.tasks) {
      a.task_states[t.task_id] = t.state;
      if (!m->workers_.count(t.worker)) {
        LiveWorker w;
        w.name = t.worker;
        // Silent "heartbeat" in the future: the worker has the recovery grace to come back.
        w.last_heartbeat = now + m->options_.recovery_grace - m->options_.heartbeat_timeout;
        m->workers_[t.worker] = std::move(w);
      }
    }
    if (IsTerminal(job->state()) || job->state() == v1::PREEMPTING) {
      a.stopping = true;
    }
    a.record = std::move(rec);
    spdlog::info("recovered attempt {} of job {} ({} tasks, job {})", a.record.attempt,
                 a.record.job_id, a.record.tasks.size(), v1::JobState_Name(job->state()));
    m->attempts_[a.record.job_id] = std::move(a);
  }
  ClusterManager* raw = m.get();
  m->subscription_ = store->Subscribe([raw](const v1::JobEvent& e) {
    // Runs on the writer thread: hand over, never block.
    raw->Post([raw, e] { raw->HandleJobEvent(e); });
  });
  m->thread_ = std::thread([raw] { raw->Loop(); });
  return m;
}

ClusterManager::~ClusterManager() {
  store_->Unsubscribe(subscription_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Writes already handed to the store call back into this object: wait for them.
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return inflight_writes_.load() == 0; });
}

void ClusterManager::Write(TxnFunction fn, std::function<void(absl::Status)> done) {
  inflight_writes_.fetch_add(1);
  store_->Write(std::move(fn), [this, done = std::move(done)](absl::Status s) {
    done(std::move(s));
    if (inflight_writes_.fetch_sub(1) == 1) {
      std::lock_guard<std::mutex> lock(mu_);
      cv_.notify_all();
    }
  });
}

void ClusterManager::Post(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    queue_.push_back(std::move(fn));
  }
  cv_.notify_one();
}

void ClusterManager::Loop() {
  absl::Time next_tick = options_.clock->Now();
  while (true) {
    std::deque<std::function<void()>> work;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, absl::ToChronoMilliseconds(options_.tick),
                   [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      work.swap(queue_);
    }
    for (auto& fn : work) fn();
    if (options_.clock->Now() >= next_tick || schedule_wanted_) {
      Tick();
      next_tick = options_.clock->Now() + options_.tick;
    }
  }
}

void ClusterManager::Sync() {
  std::promise<void> done;
  auto f = done.get_future();
  Post([&done] { done.set_value(); });
  f.wait();
}

void ClusterManager::Poke() {
  Post([this] { schedule_wanted_ = true; });
}

void ClusterManager::OnHello(std::shared_ptr<WorkerLink> link, v1::Hello hello) {
  Post([this, link = std::move(link), hello = std::move(hello)] { HandleHello(link, hello); });
}

void ClusterManager::OnDisconnected(const std::string& worker, const WorkerLink* link) {
  Post([this, worker, link] {
    auto it = workers_.find(worker);
    if (it != workers_.end() && it->second.link.get() == link) {
      spdlog::info("worker {} disconnected", worker);
      it->second.link.reset();  // lost only if it stays silent past the heartbeat timeout
    }
  });
}

void ClusterManager::OnWorkerMessage(const std::string& worker, v1::WorkerMessage message) {
  Post([this, worker, message = std::move(message)] {
    auto it = workers_.find(worker);
    if (it == workers_.end()) return;
    LiveWorker& w = it->second;
    w.last_heartbeat = options_.clock->Now();  // any message proves it is alive
    switch (message.kind_case()) {
      case v1::WorkerMessage::kHeartbeat:
        w.gpus.assign(message.heartbeat().gpus().begin(), message.heartbeat().gpus().end());
        break;
      case v1::WorkerMessage::kTaskStatus:
        HandleTaskStatus(worker, message.task_status());
        break;
      case v1::WorkerMessage::kMetrics:
        HandleMetrics(message.metrics());
        break;
      case v1::WorkerMessage::kCheckpoint:
        HandleCheckpoint(message.checkpoint());
        break;
      default:
        break;
    }
  });
}

void ClusterManager::HandleHello(std::shared_ptr<WorkerLink> link, const v1::Hello& hello) {
  if (!TokenMatches(options_.join_token, hello.join_token())) {
    spdlog::warn("refused worker {}: bad join token", hello.worker_name());
    link->Close(absl::UnauthenticatedError("bad join token"));
    return;
  }
  const std::string& name = hello.worker_name();
  if (name.empty() || name.size() > 128) {
    link->Close(absl::InvalidArgumentError("hello.worker_name must be 1..128 characters"));
    return;
  }
  LiveWorker& w = workers_[name];
  if (w.link != nullptr && w.link != link) {
    w.link->Close(absl::AbortedError("replaced by a newer session of the same worker"));
  }
  const bool was_lost = w.lost;
  w.name = name;
  w.inventory = hello.inventory();
  w.link = link;
  w.last_heartbeat = options_.clock->Now();
  w.lost = false;
  Write(UpsertWorkerTxn(name, w.inventory, v1::WORKER_READY), [](absl::Status) {});

  // Tasks it reports that no active attempt wants any more: kill them. Tasks an attempt
  // placed here that it does not report: resend if never started, else give them a
  // moment to show up as a late status.
  std::set<std::string> reported(hello.running_task_ids().begin(), hello.running_task_ids().end());
  v1::CoordinatorMessage welcome;
  v1::Welcome* wm = welcome.mutable_welcome();
  wm->set_worker_id(name);
  wm->set_heartbeat_interval_ms(absl::ToInt64Milliseconds(options_.heartbeat_interval));
  for (const std::string& id : reported) {
    ActiveAttempt* a = AttemptOfTask(id);
    if (a == nullptr || (a->stopping && a->ended)) wm->add_kill_task_ids(id);
  }
  link->Send(welcome);
  const absl::Time now = options_.clock->Now();
  for (auto& [job_id, a] : attempts_) {
    if (!a.committed) continue;
    for (const TaskRecord& t : a.record.tasks) {
      if (t.worker != name || reported.count(t.task_id)) continue;
      const v1::TaskState state = a.task_states[t.task_id];
      if (IsTerminalTask(state)) continue;
      if (state == v1::TASK_STARTING && !a.stopping) {
        SendAssignments(job_id);  // repeated assignments are ignored by the worker
      } else {
        a.missing_since.emplace(t.task_id, now);
      }
    }
  }
  spdlog::info("worker {} {} ({} slots{})", name, was_lost ? "is back" : "registered",
               WorkerSlots(w.inventory),
               w.inventory.efa_devices() ? absl::StrCat(", ", w.inventory.efa_devices(), " EFA") : "");
  schedule_wanted_ = true;
  PublishWorkers();
}

ClusterManager::ActiveAttempt* ClusterManager::AttemptOfTask(const std::string& task_id) {
  // Task ids are "<job>-<attempt>-<node_rank>".
  int64_t job_id;
  if (!absl::SimpleAtoi(task_id.substr(0, task_id.find('-')), &job_id)) return nullptr;
  auto it = attempts_.find(job_id);
  if (it == attempts_.end() || !it->second.task_states.count(task_id)) return nullptr;
  return &it->second;
}

void ClusterManager::HandleTaskStatus(const std::string& worker, const v1::TaskStatus& status) {
  ActiveAttempt* a = AttemptOfTask(status.task_id());
  if (a == nullptr) return;  // an old attempt's late report
  a->task_states[status.task_id()] = status.state();
  a->missing_since.erase(status.task_id());
  Write(SetTaskStateTxn(status.task_id(), status), [](absl::Status) {});
  const int64_t job_id = a->record.job_id;

  if (status.state() == v1::TASK_RUNNING) {
    bool all_running = true;
    for (const auto& [id, s] : a->task_states) all_running = all_running && s == v1::TASK_RUNNING;
    if (all_running && !a->running_recorded && !a->stopping) {
      a->running_recorded = true;
      a->last_progress = options_.clock->Now();
      Write(AttemptRunningTxn(job_id, a->record.attempt), [](absl::Status) {});
    }
  } else if (status.state() == v1::TASK_FAILED && !a->stopping) {
    const AttemptOutcome outcome = ClassifyFailure(status);
    EndAttempt(*a, outcome,
               absl::StrCat("task ", status.task_id(), " on ", worker, " failed: ",
                            status.message()),
               outcome == AttemptOutcome::kNodeFault ? worker : "");
  } else if (status.state() == v1::TASK_KILLED && !a->stopping) {
    EndAttempt(*a, AttemptOutcome::kRetryable,
               absl::StrCat("task ", status.task_id(), " was stopped on ", worker, ": ",
                            status.message()));
  } else if (status.state() == v1::TASK_SUCCEEDED && !a->stopping) {
    bool all_done = true;
    for (const auto& [id, s] : a->task_states) all_done = all_done && s == v1::TASK_SUCCEEDED;
    if (all_done) {
      EndAttempt(*a, AttemptOutcome::kSucceeded,
                 absl::StrCat("attempt ", a->record.attempt, ": every rank exited 0"));
    }
  }
  MaybeRelease(job_id);
}

void ClusterManager::HandleMetrics(const v1::TrainMetrics& m) {
  ActiveAttempt* a = AttemptOfTask(m.task_id());
  if (a == nullptr) return;
  if (m.step() > a->last_step) {
    a->last_step = m.step();
    a->last_progress = options_.clock->Now();
  }
  v1::JobMetricsPoint p;
  p.set_step(m.step());
  p.set_total_steps(m.total_steps());
  p.set_loss(m.loss());
  p.set_lr(m.lr());
  p.set_grad_norm(m.grad_norm());
  p.set_tokens_per_second(m.tokens_per_second());
  p.set_tflops(m.tflops());
  p.set_mfu(m.mfu());
  p.set_peak_memory_bytes(m.peak_memory_bytes());
  *p.mutable_time() = m.has_time() ? m.time() : TimeUtil::GetCurrentTime();
  p.set_attempt(a->record.attempt);
  Write(RecordMetricsTxn(a->record.job_id, p), [](absl::Status) {});
}

void ClusterManager::HandleCheckpoint(const v1::CheckpointReport& report) {
  ActiveAttempt* a = AttemptOfTask(report.task_id());
  if (a == nullptr) return;
  // Only a complete checkpoint is recorded: the trainer reports it after rank 0 wrote the
  // manifest last; the manifest must be there.
  const std::string manifest = report.path() + "/manifest.json";
  std::error_code ec;
  if (!report.path().empty() && !std::filesystem::exists(manifest, ec) &&
      std::filesystem::exists(report.path(), ec)) {
    spdlog::warn("job {}: checkpoint {} has no manifest; not recorded", a->record.job_id,
                 report.path());
    return;
  }
  const int64_t job_id = a->record.job_id;
  const int keep_last = a->spec.checkpoint().keep_last();
  Write(RecordCheckpointTxn(job_id, a->record.attempt, report),
                [this, job_id, keep_last](absl::Status s) {
                  if (s.ok() && keep_last > 0) {
                    Post([this, job_id, keep_last] { ApplyRetention(job_id, keep_last); });
                  }
                });
  a->last_progress = options_.clock->Now();
}

void ClusterManager::ApplyRetention(int64_t job_id, int keep_last) {
  absl::StatusOr<std::vector<v1::Checkpoint>> all = ListCheckpoints(*store_, job_id);
  if (!all.ok() || static_cast<int>(all->size()) <= keep_last) return;
  std::vector<int64_t> forget;
  for (size_t i = keep_last; i < all->size(); ++i) {
    // Files first, rows after: a crash in between leaves a row whose files are gone,
    // which the next pass removes again (remove_all of a missing path is a no-op).
    std::error_code ec;
    std::filesystem::remove_all((*all)[i].path(), ec);
    if (ec) {
      spdlog::warn("job {}: cannot remove checkpoint {}: {}", job_id, (*all)[i].path(), ec.message());
      continue;
    }
    forget.push_back((*all)[i].step());
  }
  if (!forget.empty()) Write(ForgetCheckpointsTxn(job_id, forget), [](absl::Status) {});
}

void ClusterManager::HandleJobEvent(const v1::JobEvent& e) {
  if (e.type() == "submitted" || e.to_state() == v1::QUEUED) schedule_wanted_ = true;
  if (e.to_state() != v1::CANCELLED) return;
  int64_t job_id;
  if (!absl::SimpleAtoi(e.job_id(), &job_id)) return;
  auto it = attempts_.find(job_id);
  if (it == attempts_.end()) return;
  // The job is already CANCELLED in the database; close the attempt and stop its gang.
  EndAttempt(it->second, AttemptOutcome::kStopped, e.reason());
}

void ClusterManager::EndAttempt(ActiveAttempt& a, AttemptOutcome outcome,
                                const std::string& reason, const std::string& excluded_worker) {
  if (a.ended) return;
  a.ended = true;
  spdlog::info("job {} attempt {} ends: {}", a.record.job_id, a.record.attempt, reason);
  AttemptEnd end;
  end.job_id = a.record.job_id;
  end.attempt = a.record.attempt;
  end.outcome = outcome;
  end.reason = reason;
  end.excluded_worker = excluded_worker;
  const int64_t job_id = a.record.job_id;
  // Durable first; the gang is stopped once the outcome is committed.
  Write(EndAttemptTxn(std::move(end)), [this, job_id, reason](absl::Status s) {
    if (!s.ok()) spdlog::error("job {}: cannot record the end of its attempt: {}", job_id, s.ToString());
    Post([this, job_id, reason] {
      auto it = attempts_.find(job_id);
      if (it == attempts_.end()) return;
      StopTasks(it->second, options_.cancel_grace, reason);
      MaybeRelease(job_id);
      schedule_wanted_ = true;
    });
  });
}

void ClusterManager::StopTasks(ActiveAttempt& a, absl::Duration grace, const std::string& reason) {
  a.stopping = true;
  for (const TaskRecord& t : a.record.tasks) {
    if (IsTerminalTask(a.task_states[t.task_id])) continue;
    auto w = workers_.find(t.worker);
    if (w == workers_.end() || w->second.link == nullptr) continue;
    v1::CoordinatorMessage m;
    m.mutable_cancel()->set_task_id(t.task_id);
    m.mutable_cancel()->set_grace_period_ms(absl::ToInt64Milliseconds(grace));
    m.mutable_cancel()->set_reason(reason);
    w->second.link->Send(std::move(m));
  }
}

void ClusterManager::MaybeRelease(int64_t job_id) {
  auto it = attempts_.find(job_id);
  if (it == attempts_.end()) return;
  ActiveAttempt& a = it->second;
  if (!a.ended) return;
  for (const TaskRecord& t : a.record.tasks) {
    if (IsTerminalTask(a.task_states[t.task_id])) continue;
    auto w = workers_.find(t.worker);
    // A lost worker's tasks are gone with it.
    if (w != workers_.end() && !w->second.lost) return;
  }
  ports_in_use_.erase(a.master_port);
  attempts_.erase(it);
  schedule_wanted_ = true;
}

int ClusterManager::AllocateMasterPort() {
  for (int p = options_.master_port_base; p < options_.master_port_base + 1000; ++p) {
    if (ports_in_use_.insert(p).second) return p;
  }
  return options_.master_port_base;
}

void ClusterManager::SendAssignments(int64_t job_id) {
  auto it = attempts_.find(job_id);
  if (it == attempts_.end()) return;
  ActiveAttempt& a = it->second;
  for (const TaskRecord& t : a.record.tasks) {
    auto w = workers_.find(t.worker);
    if (w == workers_.end() || w->second.link == nullptr) continue;
    v1::CoordinatorMessage m;
    v1::TaskSpec* ts = m.mutable_assign()->mutable_task();
    ts->set_task_id(t.task_id);
    ts->set_job_id(JobIdString(job_id));
    ts->set_attempt(a.record.attempt);
    ts->set_node_rank(t.node_rank);
    ts->set_nnodes(static_cast<int>(a.record.tasks.size()));
    ts->set_nproc_per_node(t.ranks);
    ts->set_master_addr(a.record.master_addr);
    ts->set_master_port(a.record.master_port);
    ts->set_resume_from(a.record.resume_from);
    *ts->mutable_spec() = a.spec;
    w->second.link->Send(std::move(m));
  }
}

void ClusterManager::Tick() {
  const absl::Time now = options_.clock->Now();
  // Lost workers: their attempts fail as node faults.
  for (auto& [name, w] : workers_) {
    if (w.lost || now - w.last_heartbeat < options_.heartbeat_timeout) continue;
    w.lost = true;
    spdlog::warn("worker {} lost: no heartbeat for {}", name,
                 absl::FormatDuration(now - w.last_heartbeat));
    Write(SetWorkerStateTxn(name, v1::WORKER_LOST), [](absl::Status) {});
    if (w.link != nullptr) w.link->Close(absl::UnavailableError("heartbeat timeout"));
    w.link.reset();
    std::vector<int64_t> affected;
    for (auto& [job_id, a] : attempts_) {
      for (const TaskRecord& t : a.record.tasks) {
        if (t.worker == name) affected.push_back(job_id);
      }
    }
    const std::string lost_reason = absl::StrCat(
        "worker ", name, " lost (no heartbeat for ", absl::FormatDuration(options_.heartbeat_timeout), ")");
    for (int64_t job_id : affected) {
      auto it = attempts_.find(job_id);
      if (it == attempts_.end()) continue;
      // The record says what became of the lost worker's unfinished tasks (the attempts
      // history shows them); the in-memory state waits for a late report, if one comes.
      for (const TaskRecord& t : it->second.record.tasks) {
        if (t.worker != name || IsTerminalTask(it->second.task_states[t.task_id])) continue;
        v1::TaskStatus lost;
        lost.set_task_id(t.task_id);
        lost.set_state(v1::TASK_FAILED);
        lost.set_message(absl::StrCat(lost_reason, "; its ranks' fate is unknown"));
        Write(SetTaskStateTxn(t.task_id, lost), [](absl::Status) {});
      }
      EndAttempt(it->second, AttemptOutcome::kNodeFault, lost_reason, name);
      MaybeRelease(job_id);
    }
    schedule_wanted_ = true;
    PublishWorkers();
  }
  // Stalls, deadlines, missing tasks.
  std::vector<int64_t> ids;
  for (auto& [job_id, a] : attempts_) ids.push_back(job_id);
  for (int64_t job_id : ids) {
    auto it = attempts_.find(job_id);
    if (it == attempts_.end()) continue;
    ActiveAttempt& a = it->second;
    if (a.ended) continue;
    for (const auto& [task_id, since] : a.missing_since) {
      if (now - since >= options_.missing_task_grace) {
        EndAttempt(a, AttemptOutcome::kRetryable,
                   absl::StrCat("task ", task_id, " is no longer running on its worker"));
        break;
      }
    }
    if (a.ended) continue;
    const absl::Duration stall = absl::Seconds(a.spec.run_policy().stall_timeout_seconds());
    if (a.running_recorded && stall > absl::ZeroDuration() && now - a.last_progress > stall) {
      EndAttempt(a, AttemptOutcome::kRetryable,
                 absl::StrCat("stalled: no step progress for ", absl::FormatDuration(now - a.last_progress)));
      continue;
    }
    const int64_t deadline = a.spec.run_policy().active_deadline_seconds();
    if (deadline > 0 && now - a.record.started > absl::Seconds(deadline)) {
      // (Counted from this attempt's start; earlier attempts' time is added by the
      // scheduling pass, which fails a queued job whose deadline has passed.)
      EndAttempt(a, AttemptOutcome::kDeadline,
                 absl::StrCat("active_deadline_seconds (", deadline, ") exceeded"));
    }
  }
  if (now - last_ttl_sweep_ > absl::Seconds(30)) {
    last_ttl_sweep_ = now;
    absl::StatusOr<std::vector<int64_t>> expired = ExpiredJobs(*store_, now);
    if (expired.ok()) {
      for (int64_t id : *expired) {
        spdlog::info("job {}: ttl_after_finished passed; deleting its record", id);
        Write(DeleteJobTxn(id), [](absl::Status) {});
      }
    }
  }
  if (schedule_wanted_ || now - last_pass_ > absl::Seconds(2)) SchedulePass();
}

void ClusterManager::SchedulePass() {
  const auto pass_start = std::chrono::steady_clock::now();
  const absl::Time now = options_.clock->Now();
  schedule_wanted_ = false;
  last_pass_ = now;
  absl::StatusOr<std::vector<SchedulableJob>> queued = LoadJobsInStates(*store_, {v1::QUEUED});
  if (!queued.ok()) {
    spdlog::error("scheduling pass: cannot read the queue: {}", queued.status().ToString());
    return;
  }
  std::map<int64_t, v1::PendingInfo> pending_info;
  std::vector<sched::PendingJob> pending;
  std::map<int64_t, const SchedulableJob*> by_id;
  for (const SchedulableJob& j : *queued) {
    int64_t id;
    (void)absl::SimpleAtoi(j.job.id(), &id);
    if (attempts_.count(id)) continue;  // previous attempt still stopping
    const v1::JobSpec& spec = j.job.spec();
    const int64_t deadline = spec.run_policy().active_deadline_seconds();
    if (deadline > 0 && j.first_start != absl::InfinitePast() &&
        now - j.first_start > absl::Seconds(deadline)) {
      // No active attempt to end: the job fails straight from the queue.
      Write(FailQueuedJobTxn(id, absl::StrCat("active_deadline_seconds (", deadline, ") exceeded")),
            [](absl::Status) {});
      continue;
    }
    if (j.eligible > now) {
      v1::PendingInfo& info = pending_info[id];
      info.set_code("BACKOFF");
      info.set_message(absl::StrCat("restarting after backoff in ",
                                    absl::FormatDuration(absl::Trunc(j.eligible - now, absl::Seconds(1)))));
      *info.mutable_estimated_start() = TimeUtil::MicrosecondsToTimestamp(absl::ToUnixMicros(j.eligible));
      continue;
    }
    sched::PendingJob p;
    p.job_id = id;
    p.queue = spec.queue();
    p.priority = spec.priority();
    p.queued_since = j.queued_since;
    p.nodes = spec.resources().nodes();
    p.gpus_per_node = spec.resources().gpus_per_node();
    p.efa_per_node = spec.resources().efa_per_node();
    p.instance_type = spec.resources().instance_type();
    p.node_labels.insert(spec.resources().node_labels().begin(), spec.resources().node_labels().end());
    p.excluded_workers = j.excluded_workers;
    p.last_preempted = j.last_preempted;
    if (std::optional<v1::MemoryEstimate> e = EstimateJobMemory(spec)) p.memory_per_gpu_bytes = e->total_bytes();
    p.min_nodes = spec.resources().min_nodes();  // elastic: 0 or >= 1 (validated)
    pending.push_back(std::move(p));
    by_id[id] = &j;
  }
  std::vector<sched::Worker> workers;
  for (const auto& [name, w] : workers_) {
    sched::Worker sw;
    sw.id = name;
    sw.instance_type = w.inventory.instance_type();
    sw.labels.insert(w.inventory.labels().begin(), w.inventory.labels().end());
    sw.gpus = WorkerSlots(w.inventory);
    sw.efa = w.inventory.efa_devices();
    for (const auto& gpu : w.inventory.gpus()) {
      if (sw.gpu_memory_bytes == 0 || gpu.memory_bytes() < sw.gpu_memory_bytes) sw.gpu_memory_bytes = gpu.memory_bytes();
    }
    sw.schedulable = !w.lost && w.link != nullptr;
    workers.push_back(std::move(sw));
  }
  std::vector<sched::RunningJob> running;
  for (const auto& [job_id, a] : attempts_) {
    sched::RunningJob r;
    r.job_id = job_id;
    r.queue = a.spec.queue();
    r.priority = a.spec.priority();
    for (const TaskRecord& t : a.record.tasks) r.allocations.push_back({t.worker, t.ranks});
    r.started = a.record.started;
    r.preempting = a.stopping;
    running.push_back(std::move(r));
  }
  sched::Decisions d = scheduler_.Schedule(pending, workers, running, options_.queues, now);
  std::set<std::string> gone;  // lost or disconnected: named when a gang shrinks
  for (const auto& [name, w] : workers_) {
    if (w.lost || w.link == nullptr) gone.insert(name);
  }

  for (const sched::Placement& p : d.placements) {
    const SchedulableJob& j = *by_id[p.job_id];
    ActiveAttempt a;
    a.spec = j.job.spec();
    if (a.spec.checkpoint().dir().empty() && !options_.checkpoint_root.empty()) {
      a.spec.mutable_checkpoint()->set_dir(absl::StrCat(options_.checkpoint_root, "/", p.job_id));
    }
    a.record.job_id = p.job_id;
    a.record.attempt = j.job.attempts() + 1;
    a.record.started = now;
    a.master_port = AllocateMasterPort();
    a.record.master_port = a.master_port;
    a.record.master_addr = workers_[p.allocations[0].worker_id].inventory.address();
    // Resume from the newest recorded checkpoint (restart), or as the spec asks.
    absl::StatusOr<std::vector<v1::Checkpoint>> ckpts = ListCheckpoints(*store_, p.job_id);
    if (ckpts.ok() && !ckpts->empty() &&
        (a.record.attempt > 1 || a.spec.checkpoint().resume() == "latest")) {
      a.record.resume_from = (*ckpts)[0].path();
    } else if (a.spec.checkpoint().resume() != "" && a.spec.checkpoint().resume() != "latest") {
      a.record.resume_from = a.spec.checkpoint().resume();
    }
    a.record.resize_note = ResizeNote(j, p.allocations, gone);
    for (size_t rank = 0; rank < p.allocations.size(); ++rank) {
      TaskRecord t;
      t.task_id = absl::StrCat(p.job_id, "-", a.record.attempt, "-", rank);
      t.node_rank = static_cast<int>(rank);
      t.worker = p.allocations[rank].worker_id;
      t.ranks = p.allocations[rank].gpus;
      a.task_states[t.task_id] = v1::TASK_STARTING;
      a.record.tasks.push_back(t);
    }
    a.last_progress = now;
    const int64_t job_id = p.job_id;
    // Hold the resources now, so the next pass cannot place on them twice; tell the
    // workers once the attempt is durable.
    Write(StartAttemptTxn(a.record), [this, job_id](absl::Status s) {
      Post([this, job_id, s] {
        auto it = attempts_.find(job_id);
        if (it == attempts_.end()) return;
        if (!s.ok()) {
          spdlog::info("job {}: not started: {}", job_id, s.ToString());
          ports_in_use_.erase(it->second.master_port);
          attempts_.erase(it);
          schedule_wanted_ = true;
          return;
        }
        it->second.committed = true;
        SendAssignments(job_id);
      });
    });
    attempts_[job_id] = std::move(a);
  }
  for (const sched::Preemption& p : d.preemptions) {
    auto it = attempts_.find(p.victim_job_id);
    if (it == attempts_.end() || it->second.stopping) continue;
    ActiveAttempt& victim = it->second;
    victim.stopping = true;  // counts as freeing from now on
    const std::string reason = absl::StrCat("preempted by job ", p.for_job_id, " (priority)");
    const int64_t victim_id = p.victim_job_id;
    Write(BeginPreemptionTxn(victim_id, reason), [this, victim_id, reason](absl::Status s) {
      Post([this, victim_id, reason, s] {
        auto it = attempts_.find(victim_id);
        if (it == attempts_.end()) return;
        if (!s.ok()) {
          it->second.stopping = false;
          return;
        }
        StopTasks(it->second, options_.preemption_grace, reason);
        EndAttempt(it->second, AttemptOutcome::kPreempted, reason);
      });
    });
  }
  for (const sched::Pending& p : d.pending) {
    v1::PendingInfo& info = pending_info[p.job_id];
    info.set_code(sched::PendingCodeName(p.code));
    info.set_message(p.message);
    info.set_queue_position(p.queue_position);
    if (p.estimated_start.has_value()) {
      *info.mutable_estimated_start() =
          TimeUtil::MicrosecondsToTimestamp(absl::ToUnixMicros(*p.estimated_start));
    }
  }
  {
    std::lock_guard<std::mutex> lock(published_mu_);
    pending_.swap(pending_info);
  }
  PublishWorkers();
  if (options_.metrics != nullptr) {
    options_.metrics->RecordSchedulingPass(
        absl::FromChrono(std::chrono::steady_clock::now() - pass_start));
  }
}

void ClusterManager::PublishWorkers() {
  std::vector<v1::WorkerInfo> infos;
  std::map<std::string, int> allocated;
  std::map<std::string, std::vector<std::string>> tasks;
  ClusterUsage usage;
  for (const auto& [job_id, a] : attempts_) {
    QueueUsage& q = usage.queues[a.spec.queue()];
    if (!a.ended) ++q.running_jobs;
    for (const TaskRecord& t : a.record.tasks) {
      allocated[t.worker] += t.ranks;
      tasks[t.worker].push_back(t.task_id);
      q.gpus_allocated += t.ranks;
    }
  }
  for (const auto& [name, w] : workers_) {
    v1::WorkerInfo info;
    info.set_id(name);
    info.set_name(name);
    info.set_state(w.lost ? v1::WORKER_LOST : v1::WORKER_READY);
    *info.mutable_inventory() = w.inventory;
    *info.mutable_last_heartbeat() = TimeUtil::MicrosecondsToTimestamp(absl::ToUnixMicros(w.last_heartbeat));
    for (const std::string& t : tasks[name]) info.add_running_task_ids(t);
    info.set_gpus_allocated(allocated[name]);
    for (const v1::GpuSample& g : w.gpus) *info.add_gpus() = g;
    ++usage.workers[info.state()];
    if (!w.lost) {
      usage.gpus_total += WorkerSlots(w.inventory);
      usage.gpus_allocated += allocated[name];
    }
    infos.push_back(std::move(info));
  }
  std::lock_guard<std::mutex> lock(published_mu_);
  worker_infos_.swap(infos);
  usage_ = std::move(usage);
}

std::vector<v1::WorkerInfo> ClusterManager::Workers() const {
  std::lock_guard<std::mutex> lock(published_mu_);
  return worker_infos_;
}

ClusterUsage ClusterManager::Usage() const {
  std::lock_guard<std::mutex> lock(published_mu_);
  return usage_;
}

bool ClusterManager::PendingInfoFor(int64_t job_id, v1::PendingInfo* info) const {
  std::lock_guard<std::mutex> lock(published_mu_);
  auto it = pending_.find(job_id);
  if (it == pending_.end()) return false;
  *info = it->second;
  return true;
}

}  // namespace llamafleet
