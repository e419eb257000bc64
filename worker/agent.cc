#include "worker/agent.h"

#include <grpcpp/grpcpp.h>

#include <cstdlib>
#include <filesystem>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/byte_size.h"
#include "google/protobuf/util/time_util.h"
#include "spdlog/spdlog.h"
#include "worker/credential_file.h"
#include "worker/inventory.h"
#include "worker/rank_memory.h"
#include "worker/session_hold.h"
#include "worker/task_setup.h"

namespace llamafleet::worker {
namespace {

using google::protobuf::util::TimeUtil;

// Task starts in flight at once (task_starts.h): far more than a coordinator assigns at once
// (one task per free slot), so only storage that hangs start after start reaches it.
constexpr size_t kMaxTaskStarts = 64;

absl::Status FromGrpc(const grpc::Status& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

}  // namespace

std::string WorkerAgent::WorkerName() const {
  return options_.name.empty() ? inventory_.host() : options_.name;
}

WorkerAgent::WorkerAgent(AgentOptions options) : options_(std::move(options)), instance_id_(NewInstanceId()) {
  DetectHost(&inventory_);
  for (const v1::Gpu& gpu : DetectGpus()) *inventory_.add_gpus() = gpu;
  if (inventory_.gpus_size() == 0 || options_.cpu_ranks > 0) {
    inventory_.clear_gpus();
    inventory_.set_cpu_ranks(std::max(options_.cpu_ranks, 1));
    for (int i = 0; i < inventory_.cpu_ranks(); ++i) free_gpus_.insert(i);
  } else {
    for (const v1::Gpu& gpu : inventory_.gpus()) free_gpus_.insert(gpu.index());
  }
  inventory_.set_efa_devices(CountEfaDevices());
  inventory_.set_instance_type(options_.instance_type);
  for (const auto& [k, v] : options_.labels) (*inventory_.mutable_labels())[k] = v;
  inventory_.set_address(options_.address.empty() ? inventory_.host() : options_.address);
  GpuHealthOptions health;
  for (const v1::Gpu& gpu : inventory_.gpus()) health.gpus.push_back(gpu.index());
  health.fake_for_test = options_.gpu_health_fake_for_test;
  gpu_health_ = std::make_unique<GpuHealthMonitor>(std::move(health));
  starts_ = std::make_unique<TaskStarts>(kMaxTaskStarts);
}

WorkerAgent::~WorkerAgent() {
  Shutdown(absl::Seconds(2));
  starts_->JoinAll();  // a start finishing now stops what it launched (shutting_down_)
  std::map<std::string, std::unique_ptr<TaskRunner>> tasks;
  std::vector<std::unique_ptr<TaskRunner>> finished;
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks.swap(tasks_);
    finished.swap(finished_runners_);
  }
  // Runner destructors kill and reap whatever is left, outside the lock (their
  // OnFinished takes it).
}

v1::PreflightResult WorkerAgent::RunPreflightNow() {
  int64_t sequence;
  {
    std::lock_guard<std::mutex> lock(mu_);
    sequence = ++preflight_sequence_;
  }
  PreflightOptions o;
  o.expected_gpus = inventory_.gpus_size();
  o.fail_while_exists = options_.preflight_fail_for_test;
  v1::PreflightResult r = RunPreflight(o, sequence);
  if (!r.passed()) {
    spdlog::warn("pre-flight {} failed", sequence);
    for (const v1::PreflightCheck& c : r.checks()) {
      if (c.state() == v1::PreflightCheck::FAILED) spdlog::warn("pre-flight {}: {}: {}", sequence, c.name(), c.detail());
    }
  } else {
    spdlog::debug("pre-flight {} passed in {:.3f} s", sequence, r.seconds());
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (sequence > preflight_.sequence()) preflight_ = r;
  last_preflight_ = absl::Now();
  return r;
}

void WorkerAgent::PreflightLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  last_preflight_ = absl::Now();  // the first hello runs one
  while (!shutting_down_ && !preflights_done_) {
    const absl::Time due = options_.preflight_interval > absl::ZeroDuration()
                               ? last_preflight_ + options_.preflight_interval
                               : absl::InfiniteFuture();
    auto ready = [&] { return shutting_down_ || preflights_done_ || (tasks_.empty() && (preflight_wanted_ || absl::Now() >= due)); };
    if (due == absl::InfiniteFuture()) {
      cv_.wait(lock, ready);
    } else {
      cv_.wait_until(lock, absl::ToChronoTime(std::min(due, absl::Now() + absl::Seconds(1))), ready);
    }
    if (shutting_down_ || preflights_done_ || !ready()) continue;
    preflight_wanted_ = false;
    lock.unlock();
    v1::PreflightResult r = RunPreflightNow();
    v1::WorkerMessage hb;
    *hb.mutable_heartbeat()->mutable_time() = TimeUtil::GetCurrentTime();
    *hb.mutable_heartbeat()->mutable_preflight() = std::move(r);
    EnqueueReliable(std::move(hb));  // at once: the coordinator may be about to place here
    lock.lock();
  }
}

absl::Status WorkerAgent::Run() {
  std::thread preflights([this] { PreflightLoop(); });
  struct JoinAtExit {
    WorkerAgent* agent;
    std::thread* thread;
    ~JoinAtExit() {
      {
        std::lock_guard<std::mutex> lock(agent->mu_);
        agent->preflights_done_ = true;  // Run() is over: no more sessions to check for
      }
      agent->cv_.notify_all();
      thread->join();
    }
  } join_at_exit{this, &preflights};
  absl::Duration backoff = absl::Milliseconds(250);
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (shutting_down_) return absl::OkStatus();
    }
    absl::Status s = RunSession();
    if (SessionTakenByAnother(s)) {
      std::vector<std::string> all;
      {
        std::lock_guard<std::mutex> lock(mu_);
        for (const auto& [id, runner] : tasks_) all.push_back(id);
      }
      for (const std::string& id : starts_->InFlight()) all.push_back(id);
      StopUnheld(all, absl::StrCat("no session holds it: ", s.message()));
    }
    if (s.code() == absl::StatusCode::kUnauthenticated ||
        s.code() == absl::StatusCode::kPermissionDenied ||
        s.code() == absl::StatusCode::kInvalidArgument ||
        s.code() == absl::StatusCode::kFailedPrecondition) {
      return s;
    }
    std::unique_lock<std::mutex> lock(mu_);
    if (shutting_down_) return absl::OkStatus();
    spdlog::warn("session with {} ended ({}); reconnecting in {}", options_.coordinator,
                 s.ToString(), absl::FormatDuration(backoff));
    cv_.wait_for(lock, absl::ToChronoMilliseconds(backoff), [&] { return shutting_down_; });
    backoff = std::min(backoff * 2, absl::Seconds(5));
  }
}

absl::Status WorkerAgent::RunSession() {
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (!options_.tls_ca_pem.empty()) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = options_.tls_ca_pem;
    credentials = grpc::SslCredentials(ssl);
  }
  auto channel = grpc::CreateChannel(options_.coordinator, credentials);
  auto stub = v1::WorkerService::NewStub(channel);
  grpc::ClientContext context;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutting_down_) return absl::OkStatus();
    session_context_ = &context;
  }
  auto clear_context = [&] {
    std::lock_guard<std::mutex> lock(mu_);
    session_context_ = nullptr;
  };
  std::unique_ptr<grpc::ClientReaderWriter<v1::WorkerMessage, v1::CoordinatorMessage>> stream =
      stub->Session(&context);

  v1::WorkerMessage hello;
  v1::Hello* h = hello.mutable_hello();
  h->set_worker_name(WorkerName());
  h->set_join_token(options_.join_token);
  h->set_credential(LoadCredential(options_.data_dir, WorkerName()));
  *h->mutable_inventory() = inventory_;
  h->set_version("0.1.0");
  h->set_instance_id(instance_id_);
  bool idle;
  {
    std::lock_guard<std::mutex> lock(mu_);
    idle = tasks_.empty();
  }
  // A fresh pre-flight with each hello, unless tasks run (they are not disturbed: the
  // latest result goes instead).
  if (idle) {
    *h->mutable_preflight() = RunPreflightNow();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle && preflight_.sequence() > 0) *h->mutable_preflight() = preflight_;
    for (const auto& [id, runner] : tasks_) {
      if (!runner->finished()) h->add_running_task_ids(id);
    }
    // Starting ones too: the welcome says whether the session holds them.
    for (const std::string& id : starts_->InFlight()) {
      if (!tasks_.count(id)) h->add_running_task_ids(id);
    }
  }
  const std::vector<std::string> listed(h->running_task_ids().begin(), h->running_task_ids().end());
  v1::CoordinatorMessage first;
  if (!stream->Write(hello) || !stream->Read(&first)) {
    absl::Status s = FromGrpc(stream->Finish());
    clear_context();
    return s.ok() ? absl::UnavailableError("session closed before welcome") : s;
  }
  if (!first.has_welcome()) {
    context.TryCancel();
    stream->Finish();
    clear_context();
    return absl::InternalError("coordinator did not answer hello with welcome");
  }
  if (!first.welcome().credential().empty()) {
    // First join under this name: without the credential saved, no later session would be
    // accepted, so a failure to save it ends the worker.
    if (absl::Status saved = SaveCredential(options_.data_dir, WorkerName(), first.welcome().credential());
        !saved.ok()) {
      context.TryCancel();
      stream->Finish();
      clear_context();
      return saved;
    }
    spdlog::info("received this worker's credential; saved in {}", CredentialPath(options_.data_dir));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    worker_id_ = first.welcome().worker_id();
  }
  spdlog::info(
      "registered with {} as worker {} ({} {})", options_.coordinator, first.welcome().worker_id(),
      inventory_.gpus_size() > 0
          ? absl::StrCat(inventory_.gpus_size(), inventory_.gpus_size() == 1 ? " GPU" : " GPUs")
          : absl::StrCat(inventory_.cpu_ranks(),
                         inventory_.cpu_ranks() == 1 ? " CPU rank" : " CPU ranks"),
      inventory_.efa_devices() > 0 ? absl::StrCat(", ", inventory_.efa_devices(), " EFA") : "");
  if (const uint64_t limit = RankMemoryLimit(options_.trainer_memory_limit, inventory_);
      limit > 0) {
    spdlog::info("each trainer rank may allocate at most {} (RLIMIT_DATA; --trainer-memory-limit)",
                 FormatBytes(static_cast<int64_t>(limit)));
  } else {
    spdlog::warn("trainer ranks run without a memory limit (--trainer-memory-limit none)");
  }
  StopUnheld(TasksNotHeld(first.welcome(), listed), "the coordinator's session does not hold this task");

  std::atomic<bool> done{false};
  std::thread sender([&] { SendLoop(stream.get(), &done); });
  v1::CoordinatorMessage message;
  while (stream->Read(&message)) HandleMessage(message);
  done = true;
  cv_.notify_all();
  sender.join();
  absl::Status s = FromGrpc(stream->Finish());
  clear_context();
  return s.ok() ? absl::UnavailableError("coordinator closed the session") : s;
}

void WorkerAgent::SendLoop(
    grpc::ClientReaderWriter<v1::WorkerMessage, v1::CoordinatorMessage>* stream,
    const std::atomic<bool>* session_done) {
  absl::Time next_heartbeat = absl::Now();
  while (true) {
    std::vector<v1::WorkerMessage> batch;
    std::vector<std::unique_ptr<TaskRunner>> finished;
    v1::PreflightResult latest_preflight;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_until(lock, absl::ToChronoTime(next_heartbeat), [&] {
        return session_done->load() || !reliable_.empty() || !logs_.empty();
      });
      if (session_done->load()) return;
      latest_preflight = preflight_;
      while (!reliable_.empty()) {
        batch.push_back(std::move(reliable_.front()));
        reliable_.pop_front();
      }
      while (!logs_.empty()) {
        v1::WorkerMessage m;
        *m.mutable_logs() = std::move(logs_.front());
        logs_.pop_front();
        batch.push_back(std::move(m));
      }
      buffered_log_lines_ = 0;
      finished.swap(finished_runners_);
    }
    finished.clear();  // joins monitor threads that have already returned
    if (absl::Now() >= next_heartbeat) {
      v1::WorkerMessage hb;
      *hb.mutable_heartbeat()->mutable_time() = TimeUtil::GetCurrentTime();
      for (v1::GpuSample& s : gpu_health_->Latest()) *hb.mutable_heartbeat()->add_gpus() = std::move(s);
      if (latest_preflight.sequence() > 0) *hb.mutable_heartbeat()->mutable_preflight() = latest_preflight;
      for (v1::RankProgress& r : rank_progress_.Snapshot(absl::Now())) *hb.mutable_heartbeat()->add_ranks() = std::move(r);
      batch.push_back(std::move(hb));
      next_heartbeat = absl::Now() + options_.heartbeat_interval;
    }
    for (size_t i = 0; i < batch.size(); ++i) {
      if (!stream->Write(batch[i])) {
        // Keep what was not sent (but log lines) for the next session.
        std::lock_guard<std::mutex> lock(mu_);
        for (size_t j = batch.size(); j-- > i;) {
          if (!batch[j].has_logs() && !batch[j].has_heartbeat()) reliable_.push_front(batch[j]);
        }
        return;
      }
    }
  }
}

void WorkerAgent::StopUnheld(const std::vector<std::string>& task_ids, const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& id : task_ids) {
    auto it = tasks_.find(id);
    if (it == tasks_.end()) {
      if (starts_->Cancel(id, why)) spdlog::warn("cancelling the start of task {}: {}", id, why);
      continue;
    }
    if (it->second->finished()) continue;
    spdlog::warn("stopping task {}: {}", id, why);
    it->second->Stop(absl::ZeroDuration(), why);
  }
}

void WorkerAgent::EnqueueReliable(v1::WorkerMessage message) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    reliable_.push_back(std::move(message));
  }
  cv_.notify_all();
}

void WorkerAgent::HandleMessage(const v1::CoordinatorMessage& message) {
  if (message.has_assign()) {
    const v1::TaskSpec& task = message.assign().task();
    if (starts_->Begin(task.task_id(), [this, task] { StartTask(task); }) ==
        TaskStarts::Begun::kFull) {
      v1::WorkerMessage m;  // no exit record: the node's trouble, not the job's
      m.mutable_task_status()->set_task_id(task.task_id());
      m.mutable_task_status()->set_state(v1::TASK_FAILED);
      m.mutable_task_status()->set_message(
          absl::StrCat("this worker is already starting ", starts_->InFlight().size(),
                       " tasks (is the storage they name slow or hung?); not starting another"));
      spdlog::error("task {}: {}", task.task_id(), m.task_status().message());
      EnqueueReliable(std::move(m));
    }
  } else if (message.has_cancel()) {
    const v1::CancelTask& c = message.cancel();
    std::lock_guard<std::mutex> lock(mu_);
    auto it = tasks_.find(c.task_id());
    if (it == tasks_.end()) {
      // Still starting: it is stopped before or as soon as its ranks launch.
      if (starts_->Cancel(c.task_id(), c.reason())) {
        spdlog::info("cancelling task {} while it starts: {}", c.task_id(), c.reason());
      }
      return;
    }
    spdlog::info("cancelling task {}: {}", c.task_id(), c.reason());
    it->second->Stop(absl::Milliseconds(c.grace_period_ms()), c.reason());
  }
}

std::vector<int> WorkerAgent::AllocateGpus(int count) {
  std::vector<int> out;
  for (auto it = free_gpus_.begin(); it != free_gpus_.end() && static_cast<int>(out.size()) < count;) {
    out.push_back(*it);
    it = free_gpus_.erase(it);
  }
  return out;
}

void WorkerAgent::StartTask(const v1::TaskSpec& task) {
  auto fail = [&](const std::string& why) {
    spdlog::error("task {}: {}", task.task_id(), why);
    v1::WorkerMessage m;
    v1::TaskStatus* s = m.mutable_task_status();
    s->set_task_id(task.task_id());
    s->set_state(v1::TASK_FAILED);
    s->set_message(why);
    EnqueueReliable(std::move(m));
  };
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutting_down_ || tasks_.count(task.task_id())) return;  // repeated assignment
  }
  // Who the ranks run as, the owner's token cache and the job's directories (task_setup.h).
  absl::StatusOr<TaskSetup> setup = absl::FailedPreconditionError("unchecked");
  absl::Status refused = CheckTaskPaths(task);
  if (refused.ok()) {
    setup = PrepareTask(task, options_.identities, options_.data_dir);
    refused = setup.status();
  }
  if (!refused.ok()) {
    // The job's fault (or its owner's cache's), not the node's: reported the way a trainer
    // reports bad input (an exit record with the status code), so the job fails permanently.
    const std::string why = absl::StrCat(absl::StatusCodeToString(refused.code()), ": ",
                                         refused.message());
    spdlog::error("task {}: refused before start: {}", task.task_id(), why);
    v1::WorkerMessage m;
    v1::TaskStatus* s = m.mutable_task_status();
    s->set_task_id(task.task_id());
    s->set_state(v1::TASK_FAILED);
    s->set_message(absl::StrCat("refused before start: ", why));
    v1::RankExit* e = s->add_exits();
    e->set_rank(task.node_rank() * task.nproc_per_node());
    e->set_exit_code(1);
    e->set_last_error(why);
    e->set_status_code(static_cast<int>(refused.code()));
    e->set_status_message(std::string(refused.message()));
    EnqueueReliable(std::move(m));
    return;
  }
  TaskLaunch launch;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (shutting_down_ || tasks_.count(task.task_id())) return;  // repeated assignment
    if (std::optional<std::string> why = starts_->Cancelled(task.task_id())) {
      spdlog::info("task {} cancelled before start: {}", task.task_id(), *why);
      v1::WorkerMessage m;
      m.mutable_task_status()->set_task_id(task.task_id());
      m.mutable_task_status()->set_state(v1::TASK_KILLED);
      m.mutable_task_status()->set_message(*why);
      reliable_.push_back(std::move(m));
      lock.unlock();
      cv_.notify_all();
      return;
    }
    if (static_cast<int>(free_gpus_.size()) < task.nproc_per_node()) {
      const size_t free = free_gpus_.size();
      lock.unlock();
      fail(absl::StrCat("needs ", task.nproc_per_node(), " ranks but only ", free,
                        " are free on this worker"));
      return;
    }
    launch.gpu_indices = AllocateGpus(task.nproc_per_node());
    task_gpus_[task.task_id()] = launch.gpu_indices;
  }
  const bool cpu = inventory_.gpus_size() == 0;
  launch.task = task;
  launch.trainer_command = options_.trainer_command;
  launch.work_dir = absl::StrCat(options_.data_dir, "/tasks/", task.task_id());
  launch.token_cache_dir = setup->token_cache_dir;
  launch.token_cache_max_bytes = options_.token_cache_max_bytes;
  // The worker's own OMP_NUM_THREADS, when set, reaches the ranks as it is (the trainer
  // environment passes OMP_*); otherwise its usable CPUs are divided among its ranks (GPU
  // ranks included: LibTorch's default is every core, in each of a node's 8 ranks).
  const char* omp = std::getenv("OMP_NUM_THREADS");
  if (omp == nullptr || *omp == '\0') {
    launch.cpu_threads_per_rank = std::max(1, inventory_.cpus() / std::max(1, task.nproc_per_node()));
  }
  if (cpu) launch.gpu_indices.clear();
  launch.memory_limit = RankMemoryLimit(options_.trainer_memory_limit, inventory_);
  launch.efa = inventory_.efa_devices() > 0;
  launch.run_as = setup->run_as;
  launch.umask = setup->umask;
  spdlog::info("starting task {}: job {} attempt {}, node {}/{}, {} ranks{}", task.task_id(),
               task.job_id(), task.attempt(), task.node_rank(), task.nnodes(),
               task.nproc_per_node(),
               launch.run_as.has_value() ? absl::StrCat(", as ", launch.run_as->user, " (uid ", launch.run_as->uid, ")") : "");
  absl::StatusOr<std::unique_ptr<TaskRunner>> runner =
      TaskRunner::Start(launch, this, options_.failure_grace);
  if (!runner.ok()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int g : task_gpus_[task.task_id()]) free_gpus_.insert(g);
      task_gpus_.erase(task.task_id());
    }
    fail(std::string(runner.status().message()));
    return;
  }
  {
    // RUNNING is queued under mu_: before the final status OnFinished queues for it.
    std::lock_guard<std::mutex> lock(mu_);
    TaskRunner* started = runner->get();
    tasks_[task.task_id()] = std::move(*runner);
    v1::WorkerMessage m;
    m.mutable_task_status()->set_task_id(task.task_id());
    m.mutable_task_status()->set_state(v1::TASK_RUNNING);
    reliable_.push_back(std::move(m));
    // Cancelled, unheld or shut down while it launched: it stops at once.
    if (shutting_down_) {
      started->Stop(absl::ZeroDuration(), "worker shutting down");
    } else if (std::optional<std::string> why = starts_->Cancelled(task.task_id())) {
      started->Stop(absl::ZeroDuration(), *why);
    }
  }
  cv_.notify_all();
}

void WorkerAgent::OnFinished(const std::string& task_id, v1::TaskState state,
                             const std::vector<v1::RankExit>& exits, const std::string& message) {
  spdlog::info("task {} ended {}: {}", task_id, v1::TaskState_Name(state), message);
  v1::WorkerMessage m;
  v1::TaskStatus* s = m.mutable_task_status();
  s->set_task_id(task_id);
  s->set_state(state);
  for (const v1::RankExit& e : exits) *s->add_exits() = e;
  s->set_message(message);
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int g : task_gpus_[task_id]) free_gpus_.insert(g);
    task_gpus_.erase(task_id);
    total_steps_.erase(task_id);
    last_tokenizing_.erase(task_id);
    rank_progress_.Forget(task_id);
    // The runner cannot be destroyed on its own thread: hand it to the sender to join.
    auto it = tasks_.find(task_id);
    if (it != tasks_.end()) {
      finished_runners_.push_back(std::move(it->second));
      tasks_.erase(it);
    }
    if (tasks_.empty()) preflight_wanted_ = true;  // between attempts
    reliable_.push_back(std::move(m));
  }
  cv_.notify_all();
}

void WorkerAgent::Shutdown(absl::Duration grace) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutting_down_) return;
    shutting_down_ = true;
    for (auto& [id, runner] : tasks_) runner->Stop(grace, "worker shutting down");
  }
  cv_.notify_all();
  // Wait for the tasks to end (their final status is queued), then give the sender a
  // moment to deliver it.
  const absl::Time deadline = absl::Now() + grace + absl::Seconds(5);
  while (absl::Now() < deadline) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (tasks_.empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const absl::Time flush_deadline = absl::Now() + absl::Seconds(2);
  while (absl::Now() < flush_deadline) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (reliable_.empty() || session_context_ == nullptr) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (session_context_ != nullptr) session_context_->TryCancel();
}

}  // namespace llamafleet::worker
