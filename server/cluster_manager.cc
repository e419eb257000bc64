#include "server/cluster_manager.h"

#include <openssl/crypto.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <future>
#include <random>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "clients/jobspec/jobspec.h"
#include "google/protobuf/util/time_util.h"
#include "server/elastic_grow.h"
#include "server/metrics.h"
#include "server/scheduler_input.h"
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
  if (now > before) {  // grown back (ClusterManager::MaybeGrow): name the workers it gained
    std::vector<std::string> added;
    for (const sched::Allocation& a : placed) {
      if (std::find(j.job.workers().begin(), j.job.workers().end(), a.worker_id) == j.job.workers().end()) {
        added.push_back(a.worker_id);
      }
    }
    absl::StrAppend(&note, ": capacity returned", added.empty() ? "" : absl::StrCat(" (", absl::StrJoin(added, ", "), ")"));
  } else if (!lost.empty()) {
    absl::StrAppend(&note, ": ", lost.size() == 1 ? "worker " : "workers ", absl::StrJoin(lost, ", "), " lost");
  } else {
    absl::StrAppend(&note, ": only ", now, " matching workers free");
  }
  return note;
}

using google::protobuf::util::TimeUtil;

bool TokenMatches(const std::string& expected, const std::string& given) {
  if (expected.empty() || expected.size() != given.size()) return false;
  return CRYPTO_memcmp(expected.data(), given.data(), expected.size()) == 0;
}

}  // namespace

ClusterManager::ClusterManager(JobStore* store, ClusterOptions options)
    : store_(store),
      options_(std::move(options)),
      scheduler_(options_.scheduler),
      files_(std::make_unique<SerialExecutor>("lf-files")),
      pass_thread_(std::make_unique<SerialExecutor>("lf-sched-pass")) {
  next_master_port_ = static_cast<int>(std::random_device()() % 1000);
  std::promise<int> idle;  // 0 or errno
  pass_thread_->Post([&idle] {
    sched_param param{};
    const int rc = sched_setscheduler(static_cast<pid_t>(syscall(SYS_gettid)), SCHED_IDLE, &param);
    idle.set_value(rc == 0 ? 0 : errno);
  });
  if (const int error = idle.get_future().get(); error != 0) {
    spdlog::warn("cannot run scheduling passes at SCHED_IDLE ({}); they run on the cluster loop",
                 std::strerror(error));
    pass_thread_.reset();
  }
}

absl::StatusOr<std::unique_ptr<ClusterManager>> ClusterManager::Start(JobStore* store,
                                                                      ClusterOptions options) {
  std::unique_ptr<ClusterManager> m(new ClusterManager(store, std::move(options)));
  // Recovery: attempts the database says are active. Their workers get one heartbeat
  // timeout to reconnect and report their tasks.
  absl::StatusOr<std::vector<AttemptRecord>> active = LoadActiveAttempts(*store);
  if (!active.ok()) return active.status();
  const absl::Time now = m->options_.clock->Now();
  std::map<int64_t, absl::Time> last_preempted;
  if (!active->empty()) {
    absl::StatusOr<std::vector<SchedulableJob>> running = LoadJobsInStates(
        *store, {v1::SCHEDULED, v1::RUNNING, v1::PREEMPTING});
    if (!running.ok()) return running.status();
    for (const SchedulableJob& j : *running) {
      int64_t id;
      if (absl::SimpleAtoi(j.job.id(), &id)) last_preempted[id] = j.last_preempted;
    }
  }
  for (AttemptRecord& rec : *active) {
    absl::StatusOr<v1::Job> job = store->GetJob(rec.job_id);
    if (!job.ok()) return job.status();
    ActiveAttempt a;
    a.spec = job->spec();
    a.committed = true;
    a.running_recorded = job->state() == v1::RUNNING;
    a.last_progress = now;
    a.master_port = rec.master_port;
    if (auto lp = last_preempted.find(rec.job_id); lp != last_preempted.end()) {
      a.last_preempted = lp->second;
    }
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
      // Stopping before the restart: its tasks get the recovery grace to reconnect and
      // the usual time to report that they stopped.
      a.BeginStopping(now + m->options_.recovery_grace, m->options_.preemption_grace,
                      m->options_.stop_report_slack);
    }
    a.record = std::move(rec);
    spdlog::info("recovered attempt {} of job {} ({} tasks, job {})", a.record.attempt,
                 a.record.job_id, a.record.tasks.size(), v1::JobState_Name(job->state()));
    m->attempts_[a.record.job_id] = std::move(a);
  }
  ClusterManager* raw = m.get();
  m->subscription_ = store->SubscribeBatches([raw](const std::vector<const v1::JobEvent*>& events) {
    // Runs on the writer thread: hand over, never block. Only two kinds of event matter to
    // the loop: a job joining the queue, and a cancellation. One hand-off
    // per commit: posting each event (a copy, an allocation, a wake-up) cost the writer
    // and the loop a context switch per job under a stream of submissions (issue 13).
    bool queue_grew = false;
    std::vector<v1::JobEvent> cancelled;
    for (const v1::JobEvent* e : events) {
      if (e->to_state() == v1::CANCELLED) {
        cancelled.push_back(*e);
      } else if (e->type() == "submitted" || e->to_state() == v1::QUEUED) {
        queue_grew = true;
      }
    }
    if (!queue_grew && cancelled.empty()) return;
    raw->Post([raw, queue_grew, cancelled = std::move(cancelled)] {
      if (queue_grew) raw->HandleQueueGrew();
      for (const v1::JobEvent& e : cancelled) raw->HandleCancelled(e);
    });
  });
  m->PublishAssignments();
  m->thread_ = std::thread([raw] {
    pthread_setname_np(pthread_self(), "lf-scheduler");  // for top -H, perf and gdb
    raw->Loop();
  });
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
  files_.reset();  // finishes queued retention (which may write) before the wait below
  // Writes already handed to the store call back into this object: wait for them.
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return inflight_writes_.load() == 0; });
}

std::function<void(absl::Status)> ClusterManager::Counted(std::function<void(absl::Status)> done) {
  inflight_writes_.fetch_add(1);
  return [this, done = std::move(done)](absl::Status s) {
    done(std::move(s));
    if (inflight_writes_.fetch_sub(1) == 1) {
      std::lock_guard<std::mutex> lock(mu_);
      cv_.notify_all();
    }
  };
}

void ClusterManager::Write(TxnFunction fn, std::function<void(absl::Status)> done) {
  store_->Write(std::move(fn), Counted(std::move(done)));
}

void ClusterManager::WriteEach(
    std::vector<std::pair<TxnFunction, std::function<void(absl::Status)>>> writes) {
  if (writes.empty()) return;
  for (auto& write : writes) write.second = Counted(std::move(write.second));
  store_->WriteEach(std::move(writes));
}

void ClusterManager::Post(std::function<void()> fn) {
  bool was_empty;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    was_empty = queue_.empty();
    queue_.push_back(std::move(fn));
  }
  // Only the first post of a burst wakes the loop: it takes the whole queue when it wakes
  // (and checks it again before it sleeps), so waking it again is a futex call and two
  // context switches for nothing (issue 13).
  if (was_empty) cv_.notify_one();
}

void ClusterManager::Loop() {
  absl::Time next_tick = options_.clock->Now();
  while (true) {
    std::deque<std::function<void()>> work;
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto wait = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          absl::ToChronoMicroseconds(options_.tick));
      if (pass_wanted_) {
        wait = std::min(wait, std::max(std::chrono::steady_clock::duration::zero(),
                                       next_pass_allowed_ - std::chrono::steady_clock::now()));
      }
      cv_.wait_for(lock, wait, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      work.swap(queue_);
    }
    for (auto& fn : work) fn();
    const bool pass_due =
        schedule_wanted_ ||
        (pass_wanted_ && std::chrono::steady_clock::now() >= next_pass_allowed_);
    if (options_.clock->Now() >= next_tick || pass_due) {
      Tick();
      next_tick = options_.clock->Now() + options_.tick;
    }
    Publish();
  }
}

void ClusterManager::Sync() {
  std::promise<void> done;
  auto f = done.get_future();
  Post([this, &done] {
    Publish();  // what the work before it changed is visible once Sync returns
    done.set_value();
  });
  f.wait();
}

void ClusterManager::TickNow() {
  std::promise<void> done;
  auto f = done.get_future();
  Post([this, &done] {
    Tick();
    Publish();
    done.set_value();
  });
  f.wait();
}

void ClusterManager::Poke() {
  Post([this] { pass_wanted_ = true; });
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
      ++workers_version_;
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
        HandleMetrics(worker, message.metrics());
        break;
      case v1::WorkerMessage::kCheckpoint:
        HandleCheckpoint(worker, message.checkpoint());
        break;
      case v1::WorkerMessage::kPhase:
        HandlePhase(worker, message.phase());
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
  // A new hello while the old session still looked alive: the worker restarted (or its
  // connection broke without a reset). Known now, not after a heartbeat timeout: the
  // tasks it does not list below are missing from this moment.
  const bool replaced = w.link != nullptr && w.link != link;
  if (replaced) {
    spdlog::warn("worker {} re-registered while its previous session looked alive", name);
    w.link->Close(absl::AbortedError("replaced by a newer session of the same worker"));
  }
  const bool was_lost = w.lost;
  w.name = name;
  w.inventory = hello.inventory();
  w.shared_inventory = std::make_shared<const v1::Inventory>(w.inventory);
  w.link = link;
  ++workers_version_;
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
    if (a == nullptr || (a->stopping && a->ended) || a->WorkerOf(id) != name ||
        IsTerminalTask(a->task_states[id])) {
      wm->add_kill_task_ids(id);
    }
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
        // Gone unless a late status shows up within missing_task_grace; this holds for
        // an attempt that already ended too (ReleaseAbandoned), so a restarted worker
        // never keeps a dead attempt's slots.
        a.MarkMissing(t.task_id, now);
      }
    }
  }
  spdlog::info("worker {} {} ({} slots{})", name,
               was_lost ? "is back" : (replaced ? "re-registered" : "registered"),
               WorkerSlots(w.inventory),
               w.inventory.efa_devices() ? absl::StrCat(", ", w.inventory.efa_devices(), " EFA") : "");
  pass_wanted_ = true;  // coalesced: a thousand workers registering need not mean a thousand passes
  publish_workers_ = true;
}

ClusterManager::ActiveAttempt* ClusterManager::AttemptOfTask(const std::string& task_id) {
  // Task ids are "<job>-<attempt>-<node_rank>".
  int64_t job_id;
  if (!absl::SimpleAtoi(task_id.substr(0, task_id.find('-')), &job_id)) return nullptr;
  auto it = attempts_.find(job_id);
  if (it == attempts_.end() || !it->second.task_states.count(task_id)) return nullptr;
  return &it->second;
}

ClusterManager::ActiveAttempt* ClusterManager::BoundAttempt(const std::string& worker,
                                                           const std::string& task_id,
                                                           const char* what) {
  ActiveAttempt* a = AttemptOfTask(task_id);
  if (a == nullptr) return nullptr;  // an old attempt's late report
  const std::string assigned = a->WorkerOf(task_id);
  if (assigned != worker) {
    // A worker is trusted only for the tasks assigned to it.
    spdlog::warn("ignored {} for task {} from worker {}: the task is assigned to {}", what,
                 task_id, worker, assigned);
    return nullptr;
  }
  return a;
}

void ClusterManager::HandleTaskStatus(const std::string& worker, const v1::TaskStatus& status) {
  ActiveAttempt* a = BoundAttempt(worker, status.task_id(), "a task status");
  if (a == nullptr) return;
  const TaskReportEffect effect = a->OnTaskStatus(worker, status);
  if (!effect.applied) return;  // already final (abandoned, then a late report)
  Write(SetTaskStateTxn(status.task_id(), status), [](absl::Status) {});
  const int64_t job_id = a->record.job_id;
  if (effect.record_running) {
    a->last_progress = options_.clock->Now();
    Write(AttemptRunningTxn(job_id, a->record.attempt), [](absl::Status) {});
  }
  if (effect.end.has_value()) EndAttempt(*a, *effect.end, effect.reason, effect.excluded_worker);
  if (IsTerminalTask(status.state())) publish_workers_ = true;  // its slots are free again
  MaybeRelease(job_id);
}

void ClusterManager::HandleMetrics(const std::string& worker, const v1::TrainMetrics& m) {
  ActiveAttempt* a = BoundAttempt(worker, m.task_id(), "metrics");
  if (a == nullptr) return;
  a->OnStep(m.step(), m.total_steps(), options_.clock->Now());
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

void ClusterManager::HandlePhase(const std::string& worker, const v1::StartupPhase& phase) {
  ActiveAttempt* a = BoundAttempt(worker, phase.task_id(), "a start-up phase");
  if (a == nullptr || !std::isfinite(phase.seconds()) || !std::isfinite(phase.since_start())) return;
  // A worker's text: printable ASCII only, bounded, before it goes into an event.
  auto clean = [](const std::string& s, size_t max) {
    std::string out;
    for (char c : s.substr(0, max)) out.push_back(c >= 0x20 && c < 0x7f ? c : '?');
    return out;
  };
  std::string reason = absl::StrFormat("attempt %d start-up: %s in %.2f s (%.2f s since the trainer started)",
                                       a->record.attempt, clean(phase.phase(), 64), phase.seconds(),
                                       phase.since_start());
  if (!phase.detail().empty()) absl::StrAppend(&reason, ", ", clean(phase.detail(), 256));
  Write(RecordStartupPhaseTxn(a->record.job_id, a->record.attempt, reason), [](absl::Status) {});
  if (options_.metrics != nullptr && phase.seconds() >= 0) {
    options_.metrics->RecordStartupPhase(phase.phase(), phase.seconds());
  }
}

void ClusterManager::HandleCheckpoint(const std::string& worker,
                                      const v1::CheckpointReport& report) {
  ActiveAttempt* a = BoundAttempt(worker, report.task_id(), "a checkpoint report");
  if (a == nullptr) return;
  const int64_t job_id = a->record.job_id;
  const std::string job_dir = a->spec.checkpoint().dir();
  // Only the job's own step-N directories are recorded: the coordinator deletes what it
  // records (keep_last), so a path anywhere else must never get in.
  if (absl::Status s = CheckCheckpointPath(job_dir, report.path()); !s.ok()) {
    spdlog::warn("job {}: checkpoint report from {} ignored: {}", job_id, worker, std::string(s.message()));
    return;
  }
  // Only a complete checkpoint is recorded: the trainer reports it after rank 0 wrote the
  // manifest last; where the directory is visible here, the manifest must be there.
  const std::string manifest = report.path() + "/manifest.json";
  std::error_code ec;
  if (!std::filesystem::exists(manifest, ec) && std::filesystem::exists(report.path(), ec)) {
    spdlog::warn("job {}: checkpoint {} has no manifest; not recorded", job_id, report.path());
    return;
  }
  const int keep_last = a->spec.checkpoint().keep_last();
  // Retention after recording, off the loop: the files of checkpoints beyond keep_last,
  // then their rows.
  Write(RecordCheckpointTxn(job_id, a->record.attempt, report),
        [this, job_id, keep_last, job_dir, attempt = a->record.attempt,
         step = report.step()](absl::Status s) {
          if (!s.ok()) return;
          // Durable now: an elastic gang below its size may grow back from it.
          Post([this, job_id, attempt, step] { MaybeGrow(job_id, attempt, step); });
          if (keep_last <= 0) return;
          Post([this, job_id, keep_last, job_dir] {
            files_->Post([this, job_id, keep_last, job_dir] {
              ApplyRetention(job_id, keep_last, job_dir);
            });
          });
        });
  a->last_progress = options_.clock->Now();
}

void ClusterManager::MaybeGrow(int64_t job_id, int attempt, int64_t step) {
  auto it = attempts_.find(job_id);
  if (it == attempts_.end() || it->second.record.attempt != attempt) return;
  ActiveAttempt& a = it->second;
  const absl::Time now = options_.clock->Now();
  GrowCheck check;
  check.job.job_id = job_id;
  check.job.nodes = a.spec.resources().nodes();
  check.job.min_nodes = a.spec.resources().min_nodes();
  check.nodes_now = static_cast<int>(a.record.tasks.size());
  for (const TaskRecord& t : a.record.tasks) check.workers_now.push_back(t.worker);
  check.attempt_started = a.record.started;
  check.running = a.running_recorded && !a.stopping && !a.ended;
  check.checkpoint_recorded = true;
  check.checkpoint_step = step;
  check.total_steps = a.total_steps;
  check.cooldown = absl::Seconds(a.spec.resources().elastic_cooldown_seconds());
  // Rules 1-4 first: most checkpoints are of jobs that cannot grow; they read nothing.
  if (!GrowBlocked(check, now).empty()) return;
  absl::StatusOr<QueuedJobsSnapshot> queued = store_->SnapshotQueuedJobs();
  absl::StatusOr<std::vector<SchedulableJob>> running = LoadJobsInStates(*store_, {v1::RUNNING});
  if (!queued.ok() || !running.ok()) return;
  auto self = std::find_if(running->begin(), running->end(),
                           [&](const SchedulableJob& j) { return j.job.id() == JobIdString(job_id); });
  if (self == running->end()) return;
  std::vector<WorkerView> views;
  for (const auto& [name, w] : workers_) views.push_back({name, w.inventory, !w.lost && w.link != nullptr});
  check.job = MakePendingJob(job_id, *self, views);
  const SchedulerInput input = BuildSchedulerInput(*queued, views, attempts_, now);
  const GrowDecision d =
      DecideGrow(check, input.pending, input.workers, input.running, options_.queues, scheduler_, now);
  if (!d.grow) {
    spdlog::info("job {}: stays on {} nodes after checkpoint step {}: {}", job_id, check.nodes_now, step, d.why);
    return;
  }
  // Not a failure: no restart used, no backoff, not a preemption (AttemptOutcome::kResized).
  EndAttempt(a, AttemptOutcome::kResized,
             absl::StrCat("resizing ", check.nodes_now, " \u2192 ", d.nodes_after,
                          " nodes: capacity returned (", absl::StrJoin(d.added_workers, ", "),
                          "); stopping after checkpoint step ", step));
}

void ClusterManager::ApplyRetention(int64_t job_id, int keep_last, const std::string& job_dir) {
  absl::StatusOr<std::vector<v1::Checkpoint>> all = ListCheckpoints(*store_, job_id);
  if (!all.ok()) return;
  RetentionPlan plan = PlanRetention(job_dir, *all, keep_last);
  for (size_t i = 0; i < plan.refused.size(); ++i) {
    spdlog::warn("job {}: retention leaves {} alone: {}", job_id, plan.refused[i].path(),
                 plan.refusals[i]);
  }
  std::vector<int64_t> forget;
  for (const v1::Checkpoint& c : plan.remove) {
    // Files first, rows after: a crash in between leaves a row whose files are gone,
    // which the next pass removes again (remove_all of a missing path is a no-op).
    std::error_code ec;
    std::filesystem::remove_all(c.path(), ec);
    if (ec) {
      spdlog::warn("job {}: cannot remove checkpoint {}: {}", job_id, c.path(), ec.message());
      continue;
    }
    forget.push_back(c.step());
  }
  if (!forget.empty()) Write(ForgetCheckpointsTxn(job_id, forget), [](absl::Status) {});
}

void ClusterManager::HandleQueueGrew() {
  if (AnyWorkerConnected()) pass_wanted_ = true;
}

void ClusterManager::HandleCancelled(const v1::JobEvent& e) {
  int64_t job_id;
  if (!absl::SimpleAtoi(e.job_id(), &job_id)) return;
  auto it = attempts_.find(job_id);
  if (it == attempts_.end()) return;
  // The job is already CANCELLED in the database; close the attempt and stop its gang.
  EndAttempt(it->second, AttemptOutcome::kStopped, e.reason());
}

bool ClusterManager::AnyWorkerConnected() const {
  for (const auto& [name, w] : workers_) {
    if (!w.lost && w.link != nullptr) return true;
  }
  return false;
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
  const int attempt = a.record.attempt;
  // Durable first; the gang is stopped once the outcome is committed.
  Write(EndAttemptTxn(std::move(end)), [this, job_id, attempt, reason](absl::Status s) {
    if (!s.ok()) spdlog::error("job {}: cannot record the end of its attempt: {}", job_id, s.ToString());
    Post([this, job_id, attempt, reason] {
      auto it = attempts_.find(job_id);
      // The commit requeued the job: by now this attempt may be released and the next one
      // placed under the same job id, which must not be stopped for its predecessor.
      if (it == attempts_.end() || it->second.record.attempt != attempt) return;
      StopTasks(it->second, options_.cancel_grace, reason);
      MaybeRelease(job_id);
      WantPassForFreedCapacity(job_id);
    });
  });
}

void ClusterManager::StopTasks(ActiveAttempt& a, absl::Duration grace, const std::string& reason) {
  a.BeginStopping(options_.clock->Now(), grace, options_.stop_report_slack);
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
  // A lost worker's tasks are gone with it.
  if (!a.AllTasksDone([this](const std::string& worker) {
        auto w = workers_.find(worker);
        return w == workers_.end() || w->second.lost;
      })) {
    return;
  }
  const int attempt = a.record.attempt;
  // Its last log lines may still be on their way (logs do not pass through the loop):
  // the binding outlives the attempt for a while.
  for (const TaskRecord& t : a.record.tasks) {
    recently_released_.emplace_back(t.task_id, t.worker);
    if (recently_released_.size() > 4096) recently_released_.pop_front();
  }
  ports_in_use_.erase(a.master_port);
  attempts_.erase(it);
  WantPassForFreedCapacity(job_id);
  publish_assignments_ = true;
  publish_workers_ = true;
  if (options_.on_attempt_released) options_.on_attempt_released(job_id, attempt);
}

void ClusterManager::WantPassForFreedCapacity(int64_t job_id) {
  // Freed capacity is worth a pass at once only to a queued job that could use it: one
  // the last pass left waiting for capacity, or this job itself, queued again (its
  // attempt kept it out of that pass; a requeue the last pass did not see yet has asked
  // for a pass through its event). Jobs no worker matches, or larger than the cluster,
  // stay so however many GPUs are free: a deep queue of them no longer costs a pass per
  // finished gang; the periodic pass and new submissions still look at them.
  if (last_pass_waits_for_capacity_ ||
      std::binary_search(last_pass_held_by_attempt_.begin(), last_pass_held_by_attempt_.end(),
                         job_id)) {
    schedule_wanted_ = true;
  }
}

void ClusterManager::ForEachAttemptMayErase(const std::function<void(int64_t, ActiveAttempt&)>& fn) {
  std::vector<int64_t> ids;
  for (auto& [job_id, a] : attempts_) ids.push_back(job_id);
  for (int64_t job_id : ids) {
    auto it = attempts_.find(job_id);
    if (it != attempts_.end()) fn(job_id, it->second);
  }
}

void ClusterManager::ReleaseAbandoned(absl::Time now) {
  ForEachAttemptMayErase([&](int64_t job_id, ActiveAttempt& a) {
    if (!a.committed) return;
    const std::vector<std::string> gone = a.Abandoned(now, options_.missing_task_grace);
    if (gone.empty()) return;
    for (const std::string& task_id : gone) {
      const bool missing = a.missing_since.count(task_id) > 0;
      const std::string why =
          missing ? absl::StrCat("task ", task_id, " is no longer running on its worker ",
                                 a.WorkerOf(task_id))
                  : absl::StrCat("task ", task_id, " did not report stopping on ",
                                 a.WorkerOf(task_id), " in time; released");
      spdlog::warn("job {}: {}", job_id, why);
      a.Abandon(task_id);
      v1::TaskStatus failed;
      failed.set_task_id(task_id);
      failed.set_state(v1::TASK_FAILED);
      failed.set_message(why);
      Write(SetTaskStateTxn(task_id, failed), [](absl::Status) {});
      if (!a.ended) EndAttempt(a, AttemptOutcome::kRetryable, why);
    }
    publish_workers_ = true;
    MaybeRelease(job_id);
  });
}

int ClusterManager::AllocateMasterPort() {
  // Round robin from after the last port handed out: a port an attempt just released may
  // still be in TIME_WAIT on node 0, and a restart that reused it at once would fail its
  // rendezvous with "address already in use".
  for (int i = 0; i < 1000; ++i) {
    const int p = options_.master_port_base + (next_master_port_ + i) % 1000;
    if (ports_in_use_.insert(p).second) {
      next_master_port_ = (next_master_port_ + i + 1) % 1000;
      return p;
    }
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
    for (const v1::Checkpoint& c : a.resume_candidates) {
      v1::ResumeCandidate* rc = ts->add_resume_candidates();
      rc->set_path(c.path());
      rc->set_step(c.step());
      rc->set_manifest_sha256(c.manifest_sha256());
    }
    *ts->mutable_spec() = a.spec;
    for (const std::string& root : options_.path_roots) ts->add_path_roots(root);
    w->second.link->Send(std::move(m));
  }
}

void ClusterManager::Tick() {
  const absl::Time now = options_.clock->Now();
  // Lost workers: their attempts fail as node faults.
  for (auto& [name, w] : workers_) {
    if (w.lost || now - w.last_heartbeat < options_.heartbeat_timeout) continue;
    w.lost = true;
    ++workers_version_;
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
    publish_workers_ = true;
  }
  // Tasks nobody will report any more (missing, or silent past their stop deadline).
  ReleaseAbandoned(now);
  // Stalls, deadlines.
  ForEachAttemptMayErase([&](int64_t, ActiveAttempt& a) {
    if (a.ended) return;
    const absl::Duration stall = absl::Seconds(a.spec.run_policy().stall_timeout_seconds());
    if (a.running_recorded && stall > absl::ZeroDuration() && now - a.last_progress > stall) {
      EndAttempt(a, AttemptOutcome::kRetryable,
                 absl::StrCat("stalled: no step progress for ", absl::FormatDuration(now - a.last_progress)));
      return;
    }
    const int64_t deadline = a.spec.run_policy().active_deadline_seconds();
    if (deadline > 0 && now - a.record.started > absl::Seconds(deadline)) {
      // (Counted from this attempt's start; earlier attempts' time is added by the
      // scheduling pass, which fails a queued job whose deadline has passed.)
      EndAttempt(a, AttemptOutcome::kDeadline,
                 absl::StrCat("active_deadline_seconds (", deadline, ") exceeded"));
    }
  });
  if (now - last_ttl_sweep_ > absl::Seconds(30)) {
    last_ttl_sweep_ = now;
    absl::StatusOr<std::vector<int64_t>> expired = ExpiredJobs(*store_, now);
    if (expired.ok()) {
      for (int64_t id : *expired) {
        spdlog::info("job {}: ttl_after_finished passed; deleting its record", id);
        Write(DeleteJobTxn(id), [this, id](absl::Status s) {
          if (s.ok() && options_.on_job_deleted) Post([this, id] { options_.on_job_deleted(id); });
        });
      }
    }
  }
  if (schedule_wanted_ || pass_wanted_ || now - last_pass_ > absl::Seconds(2)) SchedulePass();
}

namespace {
std::chrono::nanoseconds ThreadCpuTime() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
}
}  // namespace

void ClusterManager::SchedulePass() {
  const auto start = std::chrono::steady_clock::now();
  if (pass_thread_ == nullptr || start < passes_inline_until_) {
    RunPass();
    return;
  }
  std::promise<std::chrono::nanoseconds> done;
  pass_thread_->Post([this, &done] {
    const std::chrono::nanoseconds cpu = ThreadCpuTime();
    RunPass();
    done.set_value(ThreadCpuTime() - cpu);
  });
  const std::chrono::nanoseconds cpu = done.get_future().get();
  const auto waited = std::chrono::steady_clock::now() - start - cpu;
  if (waited > std::max<std::chrono::nanoseconds>(2 * cpu, std::chrono::milliseconds(50))) {
    passes_inline_until_ = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    spdlog::info("a scheduling pass waited {} ms for a CPU (it computed for {} ms): every CPU is "
                 "busy; passes run at normal priority for 10 s",
                 std::chrono::duration_cast<std::chrono::milliseconds>(waited).count(),
                 std::chrono::duration_cast<std::chrono::milliseconds>(cpu).count());
  }
}

void ClusterManager::RunPass() {
  const auto pass_start = std::chrono::steady_clock::now();
  const absl::Time now = options_.clock->Now();
  schedule_wanted_ = false;
  pass_wanted_ = false;
  last_pass_ = now;
  // From memory: the queue as of the newest published commit.
  absl::StatusOr<QueuedJobsSnapshot> queued = store_->SnapshotQueuedJobs();
  if (!queued.ok()) {
    spdlog::error("scheduling pass: cannot read the queue: {}", queued.status().ToString());
    last_pass_waits_for_capacity_ = true;  // not known
    return;
  }
  if (views_version_ != workers_version_) {  // a worker came, went or was lost
    views_.clear();
    for (const auto& [name, w] : workers_) {
      views_.push_back({name, w.inventory, !w.lost && w.link != nullptr});
    }
    views_version_ = workers_version_;
  }
  const PendingJobCache::Input& input =
      pending_jobs_.Build(*queued, views_, workers_version_, attempts_, now);
  for (const auto& [id, reason] : input.deadline_passed) {
    // No active attempt to end: the job fails straight from the queue.
    Write(FailQueuedJobTxn(id, reason), [](absl::Status) {});
  }
  sched::Decisions d =
      scheduler_.Schedule(input.pending, input.workers, input.running, options_.queues, now);
  std::set<std::string> gone;  // lost or disconnected: named when a gang shrinks
  for (const auto& [name, w] : workers_) {
    if (w.lost || w.link == nullptr) gone.insert(name);
  }

  // The attempts this pass starts, written in one transaction (each in a savepoint of its
  // own: one that fails leaves the others started).
  std::vector<std::pair<TxnFunction, std::function<void(absl::Status)>>> starts;
  for (const sched::Placement& p : d.placements) {
    const SchedulableJob& j = *pending_jobs_.Job(p.job_id);
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
    a.last_preempted = j.last_preempted;
    // Resume from the recorded checkpoints (restart), newest first: the trainer takes the
    // newest that still verifies against its recorded manifest hash and falls back to
    // older ones; resume_from names the newest for older trainers and the record.
    absl::StatusOr<std::vector<v1::Checkpoint>> ckpts = ListCheckpoints(*store_, p.job_id);
    if (ckpts.ok() && !ckpts->empty() &&
        (a.record.attempt > 1 || a.spec.checkpoint().resume() == "latest")) {
      a.record.resume_from = (*ckpts)[0].path();
      a.resume_candidates = *ckpts;
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
    starts.emplace_back(StartAttemptTxn(a.record), [this, job_id](absl::Status s) {
      Post([this, job_id, s] {
        auto it = attempts_.find(job_id);
        if (it == attempts_.end()) return;
        if (!s.ok()) {
          spdlog::info("job {}: not started: {}", job_id, s.ToString());
          ports_in_use_.erase(it->second.master_port);
          attempts_.erase(it);
          schedule_wanted_ = true;
          publish_assignments_ = true;
          return;
        }
        it->second.committed = true;
        SendAssignments(job_id);
      });
    });
    attempts_[job_id] = std::move(a);
  }
  WriteEach(std::move(starts));
  for (const sched::Preemption& p : d.preemptions) {
    auto it = attempts_.find(p.victim_job_id);
    if (it == attempts_.end() || it->second.stopping) continue;
    ActiveAttempt& victim = it->second;
    victim.stopping = true;  // counts as freeing from now on
    const std::string reason = absl::StrCat("preempted by job ", p.for_job_id, " (priority)");
    const int64_t victim_id = p.victim_job_id;
    const int victim_attempt = victim.record.attempt;
    Write(BeginPreemptionTxn(victim_id, reason), [this, victim_id, victim_attempt, reason](absl::Status s) {
      Post([this, victim_id, victim_attempt, reason, s] {
        auto it = attempts_.find(victim_id);
        if (it == attempts_.end() || it->second.record.attempt != victim_attempt) return;
        if (!s.ok()) {
          it->second.stopping = false;
          return;
        }
        StopTasks(it->second, options_.preemption_grace, reason);
        EndAttempt(it->second, AttemptOutcome::kPreempted, reason);
      });
    });
  }
  // Explanations are published as the scheduler made them; PendingInfoFor turns one
  // into a PendingInfo when asked (a pass over a deep queue would otherwise build one
  // message per queued job that nobody reads).
  last_pass_waits_for_capacity_ = false;
  last_pass_held_by_attempt_ = input.held_by_attempt;
  for (const sched::Pending& p : d.pending) {
    if (p.code != sched::PendingCode::kNoMatchingWorkers &&
        p.code != sched::PendingCode::kLargerThanCluster) {
      last_pass_waits_for_capacity_ = true;
      break;
    }
  }
  auto made = std::make_shared<PublishedPending>();
  made->held_back = input.held_back;
  made->pending = std::move(d.pending);
  std::shared_ptr<const PublishedPending> published = std::move(made);
  {
    std::lock_guard<std::mutex> lock(published_mu_);
    pending_.swap(published);
  }
  published.reset();  // the previous pass's, unless a reader still holds it
  if (!d.placements.empty()) publish_assignments_ = true;
  publish_workers_ = true;
  const auto pass_end = std::chrono::steady_clock::now();
  // The next pass for new submissions waits at least pass_interval, and as long as this
  // one took: under a stream of submissions to a deep queue, passes take at most half of
  // the loop. Freed capacity (schedule_wanted_) does not wait.
  next_pass_allowed_ =
      pass_end + std::max(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              absl::ToChronoMicroseconds(options_.pass_interval)),
                          pass_end - pass_start);
  if (options_.metrics != nullptr) {
    options_.metrics->RecordSchedulingPass(absl::FromChrono(pass_end - pass_start));
  }
}

void ClusterManager::Publish() {
  if (publish_assignments_) {
    publish_assignments_ = false;
    PublishAssignments();
  }
  if (publish_workers_) {
    publish_workers_ = false;
    PublishWorkers();
  }
}

void ClusterManager::PublishWorkers() {
  // What ListWorkers shows, without copying every worker's inventory: the protos are made
  // by Workers() when someone asks (this runs after every pass and every released gang).
  auto published = std::make_shared<std::vector<PublishedWorker>>();
  published->reserve(workers_.size());
  std::map<std::string, int> allocated;
  std::map<std::string, std::vector<std::string>> tasks;
  ClusterUsage usage;
  for (const auto& [job_id, a] : attempts_) {
    QueueUsage& q = usage.queues[a.spec.queue()];
    if (!a.ended) ++q.running_jobs;
    // Only tasks not yet terminal hold slots (a finished rank's GPUs are free even while
    // the rest of its gang stops).
    for (const TaskRecord& t : a.record.tasks) {
      auto st = a.task_states.find(t.task_id);
      if (st != a.task_states.end() && IsTerminalTask(st->second)) continue;
      allocated[t.worker] += t.ranks;
      tasks[t.worker].push_back(t.task_id);
      q.gpus_allocated += t.ranks;
    }
  }
  for (const auto& [name, w] : workers_) {
    PublishedWorker info;
    info.name = name;
    info.state = w.lost ? v1::WORKER_LOST : v1::WORKER_READY;
    info.inventory = w.shared_inventory;  // null for a recovered worker not back yet
    info.last_heartbeat = w.last_heartbeat;
    if (auto t = tasks.find(name); t != tasks.end()) info.running_task_ids = std::move(t->second);
    auto al = allocated.find(name);
    info.gpus_allocated = al == allocated.end() ? 0 : al->second;
    info.gpus = w.gpus;
    ++usage.workers[info.state];
    if (!w.lost) {
      usage.gpus_total += WorkerSlots(w.inventory);
      usage.gpus_allocated += info.gpus_allocated;
    }
    published->push_back(std::move(info));
  }
  std::shared_ptr<const std::vector<PublishedWorker>> done = std::move(published);
  {
    std::lock_guard<std::mutex> lock(published_mu_);
    worker_infos_.swap(done);
    usage_ = std::move(usage);
  }
}

void ClusterManager::PublishAssignments() {
  std::map<std::string, std::string> assignments;
  for (const auto& [job_id, a] : attempts_) {
    for (const TaskRecord& t : a.record.tasks) assignments[t.task_id] = t.worker;
  }
  for (const auto& [task_id, worker] : recently_released_) assignments.emplace(task_id, worker);
  std::lock_guard<std::mutex> lock(published_mu_);
  assignments_.swap(assignments);
}

bool ClusterManager::IsAssigned(const std::string& task_id, const std::string& worker) const {
  std::lock_guard<std::mutex> lock(published_mu_);
  auto it = assignments_.find(task_id);
  return it != assignments_.end() && it->second == worker;
}

std::vector<v1::WorkerInfo> ClusterManager::Workers() const {
  std::shared_ptr<const std::vector<PublishedWorker>> published;
  {
    std::lock_guard<std::mutex> lock(published_mu_);
    published = worker_infos_;
  }
  std::vector<v1::WorkerInfo> infos;
  if (published == nullptr) return infos;
  infos.reserve(published->size());
  for (const PublishedWorker& w : *published) {
    v1::WorkerInfo info;
    info.set_id(w.name);
    info.set_name(w.name);
    info.set_state(w.state);
    if (w.inventory != nullptr) *info.mutable_inventory() = *w.inventory;
    *info.mutable_last_heartbeat() =
        TimeUtil::MicrosecondsToTimestamp(absl::ToUnixMicros(w.last_heartbeat));
    for (const std::string& t : w.running_task_ids) info.add_running_task_ids(t);
    info.set_gpus_allocated(w.gpus_allocated);
    for (const v1::GpuSample& g : w.gpus) *info.add_gpus() = g;
    infos.push_back(std::move(info));
  }
  return infos;
}

ClusterUsage ClusterManager::Usage() const {
  std::lock_guard<std::mutex> lock(published_mu_);
  return usage_;
}

bool ClusterManager::PublishedPending::Find(int64_t job_id, v1::PendingInfo* info) const {
  if (auto it = held_back.find(job_id); it != held_back.end()) {
    *info = it->second;
    return true;
  }
  std::call_once(index_once, [this] {
    index.reserve(pending.size());
    for (size_t i = 0; i < pending.size(); ++i) index.emplace(pending[i].job_id, i);
  });
  auto it = index.find(job_id);
  if (it == index.end()) return false;
  const sched::Pending& p = pending[it->second];
  info->Clear();
  info->set_code(sched::PendingCodeName(p.code));
  info->set_message(p.message);
  info->set_queue_position(p.queue_position);
  if (p.estimated_start.has_value()) {
    *info->mutable_estimated_start() =
        TimeUtil::MicrosecondsToTimestamp(absl::ToUnixMicros(*p.estimated_start));
  }
  return true;
}

bool ClusterManager::PendingInfoFor(int64_t job_id, v1::PendingInfo* info) const {
  std::shared_ptr<const PublishedPending> published;
  {
    std::lock_guard<std::mutex> lock(published_mu_);
    published = pending_;
  }
  return published != nullptr && published->Find(job_id, info);
}

}  // namespace llamafleet
