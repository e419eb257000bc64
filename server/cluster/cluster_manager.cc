#include "server/cluster/cluster_manager.h"

#include <pthread.h>

#include <chrono>
#include <future>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/job_state.h"
#include "common/status_macros.h"
#include "server/cluster/worker_sessions.h"
#include "spdlog/spdlog.h"
#include "storage/sample_store.h"
#include "storage/worker_drain_store.h"

namespace llamafleet {

ClusterManager::ClusterManager(JobStore* store, ClusterOptions options)
    : store_(store),
      options_(std::move(options)),
      scheduler_(options_.scheduler),
      ports_(options_.master_port_base),
      pass_(options_.pass_interval),
      files_(std::make_unique<SerialExecutor>("lf-files")) {}

absl::StatusOr<std::unique_ptr<ClusterManager>> ClusterManager::Start(JobStore* store,
                                                                      ClusterOptions options) {
  std::unique_ptr<ClusterManager> m(new ClusterManager(store, std::move(options)));
  // Recovery: attempts the database says are active. Their workers get one heartbeat
  // timeout to reconnect and report their tasks.
  LF_ASSIGN_OR_RETURN(std::vector<AttemptRecord> active, LoadActiveAttempts(*store));
  const absl::Time now = m->options_.clock->Now();
  std::map<int64_t, absl::Time> last_preempted;
  if (!active.empty()) {
    LF_ASSIGN_OR_RETURN(std::vector<SchedulableJob> running,
                        LoadJobsInStates(*store, {v1::SCHEDULED, v1::RUNNING, v1::PREEMPTING}));
    for (const SchedulableJob& j : running) {
      int64_t id;
      if (absl::SimpleAtoi(j.job.id(), &id)) last_preempted[id] = j.last_preempted;
    }
  }
  for (AttemptRecord& rec : active) {
    LF_ASSIGN_OR_RETURN(v1::Job job, store->GetJob(rec.job_id));
    ActiveAttempt a;
    a.spec = job.spec();
    a.owner = job.owner();
    a.committed = true;
    a.running_recorded = job.state() == v1::RUNNING;
    a.last_progress = now;
    a.master_port = rec.master_port;
    if (auto lp = last_preempted.find(rec.job_id); lp != last_preempted.end()) {
      a.last_preempted = lp->second;
    }
    m->ports_.Hold(rec.master_port);
    for (const TaskRecord& t : rec.tasks) {
      a.task_states[t.task_id] = t.state;
      // Silent "heartbeat" in the future: the worker has the recovery grace to come back.
      m->workers_.AddRecovered(t.worker, now + m->options_.recovery_grace - m->options_.heartbeat_timeout);
    }
    if (IsTerminal(job.state()) || job.state() == v1::PREEMPTING) {
      // Stopping before the restart: its tasks get the recovery grace to reconnect and
      // the usual time to report that they stopped.
      a.BeginStopping(now + m->options_.recovery_grace, m->options_.preemption_grace,
                      m->options_.stop_report_slack);
    }
    a.record = std::move(rec);
    spdlog::info("recovered attempt {} of job {} ({} tasks, job {})", a.record.attempt,
                 a.record.job_id, a.record.tasks.size(), v1::JobState_Name(job.state()));
    m->attempts_[a.record.job_id] = std::move(a);
  }
  ClusterManager* raw = m.get();
  m->subscription_ = store->SubscribeBatches([raw](const std::vector<const v1::JobEvent*>& events) {
    // Runs on the writer thread: hand over, never block. Only three kinds of event matter
    // to the loop: a job joining the queue, a cancellation, and a job ending (others may
    // wait for it). One hand-off per commit, not one per event.
    bool queue_grew = false;
    std::vector<v1::JobEvent> cancelled;
    std::vector<int64_t> ended;
    for (const v1::JobEvent* e : events) {
      if (IsTerminal(e->to_state()) && !EndsJob(*e)) continue;  // a note on a finished job
      if (EndsJob(*e)) {
        if (int64_t id; absl::SimpleAtoi(e->job_id(), &id)) ended.push_back(id);
      }
      if (e->to_state() == v1::CANCELLED) {
        cancelled.push_back(*e);
      } else if (e->type() == "submitted" || e->to_state() == v1::QUEUED) {
        queue_grew = true;
      }
    }
    if (!queue_grew && cancelled.empty() && ended.empty()) return;
    raw->Post([raw, queue_grew, cancelled = std::move(cancelled), ended = std::move(ended)] {
      if (queue_grew) raw->HandleQueueGrew();
      for (const v1::JobEvent& e : cancelled) raw->HandleCancelled(e);
      for (int64_t id : ended) raw->pass_.JobEnded(id);
    });
  });
  // Drains outlive restarts: in force before the first pass.
  LF_ASSIGN_OR_RETURN(auto drains, ListWorkerDrains(*store));
  for (const auto& [name, d] : drains) m->workers_.SetDrain(d);
  m->drains_read_ = std::move(drains);
  m->next_drain_read_ = now + m->options_.drain_poll;
  m->published_.SetAssignments(m->attempts_, m->recently_released_);
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
  // (and checks it again before it sleeps).
  if (was_empty) cv_.notify_one();
}

void ClusterManager::Loop() {
  absl::Time next_tick = options_.clock->Now();
  while (true) {
    std::deque<std::function<void()>> work;
    {
      std::unique_lock<std::mutex> lock(mu_);
      const auto wait = pass_.Wait(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                       absl::ToChronoMicroseconds(options_.tick)),
                                   std::chrono::steady_clock::now());
      cv_.wait_for(lock, wait, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      work.swap(queue_);
    }
    for (auto& fn : work) fn();
    if (options_.clock->Now() >= next_tick || pass_.Due(std::chrono::steady_clock::now())) {
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
  Post([this] { pass_.WantSoon(); });
}

void ClusterManager::OnHello(std::shared_ptr<WorkerLink> link, v1::Hello hello) {
  Post([this, link = std::move(link), hello = std::move(hello)] { HandleHello(link, hello); });
}

void ClusterManager::OnDisconnected(const std::string& worker, const WorkerLink* link) {
  Post([this, worker, link] { HandleDisconnected(worker, link); });
}

void ClusterManager::OnWorkerMessage(const std::string& worker, v1::WorkerMessage message) {
  Post([this, worker, message = std::move(message)] {
    LiveWorker* w = workers_.Heard(worker, options_.clock->Now());  // any message proves it is alive
    if (w == nullptr) return;
    switch (message.kind_case()) {
      case v1::WorkerMessage::kHeartbeat:
        w->gpus.assign(message.heartbeat().gpus().begin(), message.heartbeat().gpus().end());
        if (message.heartbeat().gpus_size() > 0) HandleGpuHealth(worker, message.heartbeat().gpus());
        if (message.heartbeat().preflight().sequence() != 0 &&
            message.heartbeat().preflight().sequence() != w->preflight.sequence()) {
          HandlePreflight(worker, message.heartbeat().preflight());
        }
        if (message.heartbeat().ranks_size() > 0) HandleRankProgress(worker, message.heartbeat().ranks());
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
      case v1::WorkerMessage::kTokenizing:
        HandleTokenizing(worker, message.tokenizing());
        break;
      case v1::WorkerMessage::kEval:
        HandleEval(worker, message.eval());
        break;
      case v1::WorkerMessage::kEarlyStop:
        HandleEarlyStop(worker, message.early_stop());
        break;
      case v1::WorkerMessage::kSample:
        // Rank 0's sample at an evaluation (eval.samples): stored for the job's current
        // attempt; RecordSampleTxn bounds it (storage/sample_store.h).
        if (ActiveAttempt* a = BoundAttempt(worker, message.sample().task_id(), "a sample")) {
          v1::Sample sample = message.sample().sample();
          sample.set_attempt(a->record.attempt);
          Write(RecordSampleTxn(a->record.job_id, std::move(sample)), [](absl::Status) {});
        }
        break;
      default:
        break;
    }
  });
}

void ClusterManager::HandleHello(std::shared_ptr<WorkerLink> link, const v1::Hello& hello) {
  if (!JoinTokenMatches(options_.join_token, hello.join_token())) {
    spdlog::warn("refused worker {}: bad join token", hello.worker_name());
    link->Close(absl::UnauthenticatedError("bad join token"));
    return;
  }
  const std::string& name = hello.worker_name();
  if (name.empty() || name.size() > 128) {
    link->Close(absl::InvalidArgumentError("hello.worker_name must be 1..128 characters"));
    return;
  }
  if (absl::Status s = ValidateInstanceId(hello.instance_id()); !s.ok()) {
    link->Close(s);
    return;
  }
  // One process per name (worker_sessions.h): a second process is refused while the
  // name's session lives, and leaves that session, its tasks and their attempts untouched.
  const HelloVerdict verdict = JudgeHello(workers_.Find(name), hello.instance_id());
  if (verdict == HelloVerdict::kRefused) {
    const absl::Status refused = SecondSessionRefused(name, *workers_.Find(name), options_.clock->Now());
    spdlog::warn("refused a second session for worker {}: another process presented its credential", name);
    link->Close(refused);
    return;
  }
  // The same process again while its old session still looked alive (its connection broke
  // without a reset): the old one is closed, and the tasks it does not list below are
  // missing from this moment.
  const WorkerRegistry::Registration r =
      workers_.Register(name, hello.inventory(), hello.instance_id(), link, options_.clock->Now());
  const LiveWorker& w = *r.worker;
  Write(UpsertWorkerTxn(name, w.inventory, v1::WORKER_READY), [](absl::Status) {});
  // A new process numbers its pre-flights from 1 again: this hello's is always new.
  r.worker->preflight.Clear();
  if (hello.preflight().sequence() != 0) HandlePreflight(name, hello.preflight());
  // Another process than the one the tasks placed here were sent to: they are gone with it.
  if (verdict == HelloVerdict::kNewProcess) EndPreviousProcessTasks(name);

  // Tasks it reports that no active attempt wants any more (or that a previous process
  // ran): not held, so the worker kills them. Tasks an attempt placed here that it does not
  // report: resend if never started, else give them a moment to show up as a late status.
  std::set<std::string> reported(hello.running_task_ids().begin(), hello.running_task_ids().end());
  v1::CoordinatorMessage welcome;
  v1::Welcome* wm = welcome.mutable_welcome();
  wm->set_worker_id(name);
  wm->set_heartbeat_interval_ms(absl::ToInt64Milliseconds(options_.heartbeat_interval));
  wm->mutable_held();  // present even when empty: the worker holds exactly what it lists
  for (const std::string& id : reported) {
    ActiveAttempt* a = AttemptOfTask(id);
    if (verdict == HelloVerdict::kNewProcess || a == nullptr || (a->stopping && a->ended) ||
        a->WorkerOf(id) != name || IsTerminalTask(a->task_states[id])) {
      wm->add_kill_task_ids(id);
    } else {
      wm->mutable_held()->add_task_ids(id);
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
               r.was_lost ? "is back" : (r.replaced ? "re-registered" : "registered"),
               WorkerSlots(w.inventory),
               w.inventory.efa_devices() ? absl::StrCat(", ", w.inventory.efa_devices(), " EFA") : "");
  pass_.WantSoon();  // coalesced: a thousand workers registering need not mean a thousand passes
  publish_workers_ = true;
}

void ClusterManager::HandleQueueGrew() {
  if (workers_.AnyConnected()) pass_.WantSoon();
}

void ClusterManager::Tick() {
  const absl::Time now = options_.clock->Now();
  // Lost workers: their attempts fail as node faults.
  for (const std::string& name : workers_.CollectLost(now, options_.heartbeat_timeout)) {
    HandleWorkerLost(name);
  }
  // Tasks nobody will report any more (missing, or silent past their stop deadline).
  ReleaseAbandoned(now);
  SettleHeldFailures(now);
  ReadDrains(now);
  EndStalledAndOverdue(now);
  EndHung(now);
  for (int64_t id : expiry_.Due(*store_, now)) {
    spdlog::info("job {}: ttl_after_finished passed; deleting its record", id);
    Write(DeleteJobTxn(id), [this, id](absl::Status s) {
      if (!s.ok() || !options_.on_job_deleted) return;
      Post([this, id] { files_->Post([this, id] { options_.on_job_deleted(id, ""); }); });
    });
  }
  std::optional<QueuedJobsSnapshot> queue;
  if (pass_.ShouldCompareQueue(workers_.version())) {
    absl::StatusOr<QueuedJobsSnapshot> now_queued = store_->SnapshotQueuedJobs();
    if (now_queued.ok()) queue = *std::move(now_queued);
  }
  if (pass_.Run(now, queue ? &*queue : nullptr, attempts_)) RunPass(std::move(queue));
}

void ClusterManager::DeleteJob(int64_t job_id, std::string export_dir,
                               std::function<void(absl::StatusOr<std::vector<std::string>>)> done) {
  Post([this, job_id, export_dir = std::move(export_dir), done = std::move(done)]() mutable {
    if (attempts_.count(job_id) > 0) {
      done(absl::FailedPreconditionError(absl::StrCat(
          "job ", job_id, "'s last attempt is still stopping; delete it once its gang has stopped")));
      return;
    }
    Write(DeleteFinishedJobTxn(job_id), [this, job_id, export_dir = std::move(export_dir),
                                         done = std::move(done)](absl::Status s) mutable {
      if (!s.ok()) {
        done(s);
        return;
      }
      spdlog::info("job {}: deleted on request", job_id);
      // What it left is removed off the loop: the storage may hang.
      Post([this, job_id, export_dir = std::move(export_dir), done = std::move(done)]() mutable {
        files_->Post([this, job_id, export_dir = std::move(export_dir), done = std::move(done)] {
          std::vector<std::string> lines = {
              "record, events, metrics, attempts and checkpoint list deleted"};
          if (options_.on_job_deleted) {
            for (std::string& line : options_.on_job_deleted(job_id, export_dir))
              lines.push_back(std::move(line));
          }
          done(std::move(lines));
        });
      });
    });
  });
}

void ClusterManager::HandleWorkerLost(const std::string& name) {
  Write(SetWorkerStateTxn(name, v1::WORKER_LOST), [](absl::Status) {});
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
      WriteTaskFailed(t.task_id, absl::StrCat(lost_reason, "; its ranks' fate is unknown"));
    }
    EndAttempt(it->second, AttemptOutcome::kNodeFault, lost_reason, name);
    MaybeRelease(job_id);
  }
  pass_.WantNow();
  publish_workers_ = true;
}

void ClusterManager::Publish() {
  if (publish_assignments_) {
    publish_assignments_ = false;
    published_.SetAssignments(attempts_, recently_released_);
  }
  if (publish_workers_) {
    publish_workers_ = false;
    published_.SetWorkers(workers_.workers(), workers_.drains(), attempts_);
  }
}

std::vector<v1::WorkerInfo> ClusterManager::Workers() const { return published_.Workers(); }

ClusterUsage ClusterManager::Usage() const { return published_.Usage(); }

bool ClusterManager::PendingInfoFor(int64_t job_id, v1::PendingInfo* info) const {
  return published_.PendingInfoFor(job_id, info);
}

bool ClusterManager::IsAssigned(const std::string& task_id, const std::string& worker) const {
  return published_.IsAssigned(task_id, worker);
}

}  // namespace llamafleet
