#include "server/cluster/cluster_view.h"

#include "google/protobuf/util/time_util.h"
#include "server/cluster/scheduler_input.h"

namespace llamafleet {

using google::protobuf::util::TimeUtil;

void PublishedCluster::SetPending(std::map<int64_t, v1::PendingInfo> held_back,
                                  std::vector<sched::Pending> pending) {
  auto made = std::make_shared<Pending>();
  made->held_back = std::move(held_back);
  made->pending = std::move(pending);
  std::shared_ptr<const Pending> published = std::move(made);
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.swap(published);
  }
  published.reset();  // the previous pass's, unless a reader still holds it
}

void PublishedCluster::SetWorkers(const std::map<std::string, LiveWorker>& workers,
                                  const std::map<std::string, WorkerDrainRecord>& drains,
                                  const std::map<int64_t, AttemptTracker>& attempts) {
  auto published = std::make_shared<std::vector<Worker>>();
  published->reserve(workers.size());
  std::map<std::string, int> allocated;
  std::map<std::string, std::vector<std::string>> tasks;
  ClusterUsage usage;
  for (const auto& [job_id, a] : attempts) {
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
  for (const auto& [name, w] : workers) {
    Worker info;
    info.name = name;
    if (auto d = drains.find(name); d != drains.end()) info.drain = d->second;
    info.state = StateOf(w, info.drain.has_value());
    info.preflight = w.preflight;
    info.straggler = w.straggler;
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
  std::shared_ptr<const std::vector<Worker>> done = std::move(published);
  {
    std::lock_guard<std::mutex> lock(mu_);
    workers_.swap(done);
    usage_ = std::move(usage);
  }
}

void PublishedCluster::SetAssignments(
    const std::map<int64_t, AttemptTracker>& attempts,
    const std::deque<std::pair<std::string, std::string>>& recently_released) {
  std::map<std::string, std::string> assignments;
  for (const auto& [job_id, a] : attempts) {
    for (const TaskRecord& t : a.record.tasks) assignments[t.task_id] = t.worker;
  }
  for (const auto& [task_id, worker] : recently_released) assignments.emplace(task_id, worker);
  std::lock_guard<std::mutex> lock(mu_);
  assignments_.swap(assignments);
}

bool PublishedCluster::IsAssigned(const std::string& task_id, const std::string& worker) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = assignments_.find(task_id);
  return it != assignments_.end() && it->second == worker;
}

std::vector<v1::WorkerInfo> PublishedCluster::Workers() const {
  std::shared_ptr<const std::vector<Worker>> published;
  {
    std::lock_guard<std::mutex> lock(mu_);
    published = workers_;
  }
  std::vector<v1::WorkerInfo> infos;
  if (published == nullptr) return infos;
  infos.reserve(published->size());
  for (const Worker& w : *published) {
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
    if (w.drain.has_value()) {
      info.mutable_drain()->set_reason(w.drain->reason);
      info.mutable_drain()->set_source(w.drain->source);
      *info.mutable_drain()->mutable_since() =
          TimeUtil::MicrosecondsToTimestamp(absl::ToUnixMicros(w.drain->since));
    }
    if (w.preflight.sequence() > 0) *info.mutable_preflight() = w.preflight;
    if (!w.straggler.job_id().empty()) *info.mutable_straggler() = w.straggler;
    infos.push_back(std::move(info));
  }
  return infos;
}

ClusterUsage PublishedCluster::Usage() const {
  std::lock_guard<std::mutex> lock(mu_);
  return usage_;
}

bool PublishedCluster::Pending::Find(int64_t job_id, v1::PendingInfo* info) const {
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

bool PublishedCluster::PendingInfoFor(int64_t job_id, v1::PendingInfo* info) const {
  std::shared_ptr<const Pending> published;
  {
    std::lock_guard<std::mutex> lock(mu_);
    published = pending_;
  }
  return published != nullptr && published->Find(job_id, info);
}

}  // namespace llamafleet
