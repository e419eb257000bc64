#include "scheduler/scheduler.h"

#include <algorithm>
#include <limits>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace llamafleet::sched {

const char* PendingCodeName(PendingCode code) {
  switch (code) {
    case PendingCode::kInsufficientCapacity:
      return "INSUFFICIENT_CAPACITY";
    case PendingCode::kNoMatchingWorkers:
      return "NO_MATCHING_WORKERS";
    case PendingCode::kQuotaExceeded:
      return "QUOTA_EXCEEDED";
    case PendingCode::kBlockedByReservation:
      return "BLOCKED_BY_RESERVATION";
    case PendingCode::kWaitingForPreemption:
      return "WAITING_FOR_PREEMPTION";
    case PendingCode::kPreemptionCooldown:
      return "PREEMPTION_COOLDOWN";
    case PendingCode::kLargerThanCluster:
      return "LARGER_THAN_CLUSTER";
  }
  return "UNKNOWN";
}

namespace {

using Labels = std::map<std::string, std::string>;

// Workers that look the same to every selector: same instance type, EFA count and labels.
// A job's selectors are evaluated once per class, not once per worker, and free capacity
// is indexed per class by free-GPU count, so "are there N workers with g free GPUs" costs
// O(classes x GPUs per worker), independent of the number of workers.
struct WorkerClass {
  const std::string* instance_type = nullptr;
  int efa = 0;
  int64_t gpu_memory = 0;  // 0 = unknown
  const Labels* labels = nullptr;
  int max_gpus = 0;
  std::vector<int> members;            // worker indices, ascending (= by worker id)
  std::vector<std::set<int>> by_free;  // [f]: workers with f GPUs available to the pass
  std::vector<int> raw_count;          // [f]: workers with f free GPUs, holds ignored
  std::vector<int> cap_count;          // [c]: workers with c GPUs in total
  std::vector<int> freeing;            // workers with unclaimed GPUs of preempting jobs
  std::vector<int64_t> holders;        // jobs holding capacity on members, in order
};

struct WorkerState {
  int cls = -1;  // -1: not schedulable
  int gpus = 0;
  int free = 0;  // available to the rest of the pass (holds subtracted)
  int raw = 0;   // free, holds not subtracted
  // GPUs held by reservations that a job ending before `res_until` may still use.
  int res_held = 0;
  absl::Time res_until = absl::InfiniteFuture();
  int freeing = 0;  // GPUs of preempting jobs not yet claimed by a pending job
  std::vector<std::pair<int, int>> jobs;  // (running index, GPUs here)
  // (expected end, GPUs) of everything running here; InfiniteFuture when unknown.
  std::vector<std::pair<absl::Time, int>> releases;
  bool releases_sorted = false;
  uint32_t stamp = 0;  // == Pass::stamp_ while a candidate of the job being considered
  int cand = -1;       // position among Preempt's workers missing GPUs, -1 otherwise
};

// What victim selection reads of a running job, packed (RunningJob is large).
struct RunState {
  int64_t job_id = 0;
  absl::Time started;
  int priority = 0;
  int total_gpus = 0;
  bool preempting = false;
  bool cooling = false;  // preempted within the cool-down
  bool claimed = false;  // chosen as a victim in this pass
};

// One victim set covering one worker's deficit, with its cost. Lower is better: fewer
// GPUs lost, then lower priority, then most recently started.
struct Cover {
  int64_t gpus_lost = 0;
  int max_priority = 0;
  absl::Time oldest_start = absl::InfiniteFuture();
  absl::InlinedVector<int, 8> victims;  // running indices
  absl::InlinedVector<int64_t, 8> ids;  // their job ids, ascending: the last tie-break
  bool operator<(const Cover& o) const {
    if (gpus_lost != o.gpus_lost) return gpus_lost < o.gpus_lost;
    if (max_priority != o.max_priority) return max_priority < o.max_priority;
    if (oldest_start != o.oldest_start) return oldest_start > o.oldest_start;
    return ids < o.ids;
  }
};

struct QueueState {
  int64_t quota = 0;  // 0 = unlimited
  int64_t used = 0;   // GPUs held by running jobs and this pass's placements
};

struct PreemptFailure {
  int priority;
  int nodes;
  int gpus;
  PendingCode code;
};

struct Shape {
  std::vector<int> classes;  // ascending
  int64_t largest_too_small = 0;  // GPU memory of the biggest class excluded only by memory
  std::vector<PreemptFailure> preempt_failures;
  // Holders() text, valid while Pass::holds_version_ == holders_version.
  uint64_t holders_version = ~uint64_t{0};
  std::string holders_text;
  mutable std::unordered_map<uint64_t, std::string> needs;  // (nodes, gpus_per_node) -> Needs()
  struct Estimate {
    uint64_t version = 0;  // Pass::state_version_ it was computed at
    std::optional<absl::Time> start;
  };
  mutable std::unordered_map<uint64_t, Estimate> estimates;  // (nodes, gpus_per_node) ->
};

// Orders shapes by the job's selectors without copying them.
struct ShapeKey {
  const std::string* instance_type;
  int efa;
  const Labels* labels;
  int64_t memory = 0;  // workers: GPU memory; jobs: memory needed per GPU
  bool operator<(const ShapeKey& o) const {
    return std::tie(*instance_type, efa, *labels, memory) <
           std::tie(*o.instance_type, o.efa, *o.labels, o.memory);
  }
  bool operator==(const ShapeKey& o) const {
    return efa == o.efa && memory == o.memory && *instance_type == *o.instance_type &&
           *labels == *o.labels;
  }
};

struct ShapeKeyHash {
  size_t operator()(const ShapeKey& k) const {
    size_t h = std::hash<std::string>()(*k.instance_type) * 31 + static_cast<size_t>(k.efa);
    h = h * 31 + std::hash<int64_t>()(k.memory);
    for (const auto& [key, value] : *k.labels) {
      h = h * 131 + std::hash<std::string>()(key);
      h = h * 131 + std::hash<std::string>()(value);
    }
    return h;
  }
};

std::string GiB(int64_t bytes) {
  return absl::StrFormat("%.1f GiB", static_cast<double>(bytes) / static_cast<double>(int64_t{1} << 30));
}

std::string Plural(int n, const char* one, const char* many) {
  return absl::StrCat(n, " ", n == 1 ? one : many);
}

std::string Rfc3339(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", t, absl::UTCTimeZone());
}

class Pass {
 public:
  Pass(const Config& config, const std::vector<const PendingJob*>& pending,
       const std::vector<Worker>& workers, const std::vector<RunningJob>& running,
       const std::map<std::string, QueueConfig>& queues, absl::Time now)
      : config_(config),
        pending_(pending),
        workers_(workers),
        running_(running),
        queues_(queues),
        now_(now) {}

  Decisions Run() {
    IndexWorkers();
    IndexRunning();
    // Sort compact keys, not the (large) jobs themselves.
    struct Key {
      int priority;
      absl::Time queued_since;
      int64_t job_id;
      int index;
    };
    std::vector<Key> order;
    order.reserve(pending_.size());
    for (size_t i = 0; i < pending_.size(); ++i) {
      const PendingJob& j = *pending_[i];
      order.push_back(Key{j.priority, j.queued_since, j.job_id, static_cast<int>(i)});
    }
    std::sort(order.begin(), order.end(), [](const Key& x, const Key& y) {
      if (x.priority != y.priority) return x.priority > y.priority;
      if (x.queued_since != y.queued_since) return x.queued_since < y.queued_since;
      return x.job_id < y.job_id;
    });
    out_.pending.reserve(pending_.size());
    pending_queue_.reserve(pending_.size());
    // Jobs are visited in scheduling order, i.e. all over memory: fetch ahead.
    constexpr size_t kAhead = 8;
    for (size_t i = 0; i < order.size(); ++i) {
      if (i + kAhead < order.size()) {
        const char* next = reinterpret_cast<const char*>(pending_[order[i + kAhead].index]);
        __builtin_prefetch(next);
        __builtin_prefetch(next + 64);
        __builtin_prefetch(next + 128);
      }
      Consider(*pending_[order[i].index]);
    }
    // Queue positions: scheduling order among what is still pending, per queue.
    std::unordered_map<std::string, int> position;
    for (size_t i = 0; i < out_.pending.size(); ++i) {
      out_.pending[i].queue_position = ++position[*pending_queue_[i]];
    }
    return std::move(out_);
  }

 private:
  // ---- indexing ------------------------------------------------------------------

  void IndexWorkers() {
    std::vector<int> by_id(workers_.size());
    for (size_t i = 0; i < by_id.size(); ++i) by_id[i] = static_cast<int>(i);
    std::sort(by_id.begin(), by_id.end(),
              [this](int a, int b) { return workers_[a].id < workers_[b].id; });
    // Worker indices below are positions in id order, so "ascending index" is by id.
    order_.reserve(workers_.size());
    state_.reserve(workers_.size());
    std::map<ShapeKey, int> class_of;
    for (int wi : by_id) {
      const Worker& w = workers_[wi];
      if (index_.count(w.id)) continue;  // duplicate id: the first one wins
      int idx = static_cast<int>(order_.size());
      index_.emplace(w.id, idx);
      order_.push_back(&w);
      WorkerState s;
      s.gpus = std::max(0, w.gpus);
      s.free = s.raw = s.gpus;
      if (w.schedulable) {
        const int64_t memory = std::max<int64_t>(0, w.gpu_memory_bytes);
        auto [it, inserted] = class_of.emplace(ShapeKey{&w.instance_type, w.efa, &w.labels, memory},
                                               static_cast<int>(classes_.size()));
        if (inserted) {
          classes_.emplace_back();
          classes_.back().instance_type = &w.instance_type;
          classes_.back().efa = w.efa;
          classes_.back().gpu_memory = memory;
          classes_.back().labels = &w.labels;
        }
        s.cls = it->second;
        WorkerClass& c = classes_[s.cls];
        c.members.push_back(idx);
        c.max_gpus = std::max(c.max_gpus, s.gpus);
      }
      state_.push_back(std::move(s));
    }
  }

  void IndexRunning() {
    run_.resize(running_.size());
    run_allocs_.resize(running_.size());
    min_victim_priority_ = std::numeric_limits<int>::max();
    for (size_t r = 0; r < running_.size(); ++r) {
      const RunningJob& job = running_[r];
      int total = 0;
      for (const Allocation& a : job.allocations) {
        total += std::max(0, a.gpus);
        auto it = index_.find(a.worker_id);
        if (it == index_.end() || a.gpus <= 0) continue;
        run_allocs_[r].emplace_back(it->second, a.gpus);
        WorkerState& s = state_[it->second];
        s.free -= a.gpus;
        s.jobs.emplace_back(static_cast<int>(r), a.gpus);
        s.releases.emplace_back(job.expected_end.value_or(absl::InfiniteFuture()), a.gpus);
        if (job.preempting) s.freeing += a.gpus;
      }
      RunState& rs = run_[r];
      rs.job_id = job.job_id;
      rs.started = job.started;
      rs.priority = job.priority;
      rs.total_gpus = total;
      rs.preempting = job.preempting;
      rs.cooling = now_ - job.last_preempted < config_.preemption_cooldown;
      QueueFor(job.queue).used += total;
      if (!job.preempting) min_victim_priority_ = std::min(min_victim_priority_, job.priority);
    }
    for (WorkerClass& c : classes_) {
      c.by_free.resize(c.max_gpus + 1);
      c.raw_count.assign(c.max_gpus + 1, 0);
      c.cap_count.assign(c.max_gpus + 1, 0);
      for (int idx : c.members) {
        WorkerState& s = state_[idx];
        s.free = s.raw = std::max(0, s.free);
        c.by_free[s.free].insert(c.by_free[s.free].end(), idx);
        ++c.raw_count[s.raw];
        ++c.cap_count[s.gpus];
        if (s.freeing > 0) c.freeing.push_back(idx);
      }
    }
  }

  QueueState& QueueFor(const std::string& name) {
    auto [it, inserted] = queue_state_.try_emplace(name);
    if (inserted) {
      auto q = queues_.find(name);
      if (q != queues_.end()) it->second.quota = q->second.gpu_quota;
    }
    return it->second;
  }

  Shape& ShapeFor(const PendingJob& job) {
    ShapeKey key{&job.instance_type, job.efa_per_node, &job.node_labels, job.memory_per_gpu_bytes};
    auto it = shapes_.find(key);
    if (it != shapes_.end()) return it->second;
    Shape& shape = shapes_[key];
    for (size_t ci = 0; ci < classes_.size(); ++ci) {
      const WorkerClass& c = classes_[ci];
      if (!job.instance_type.empty() && *c.instance_type != job.instance_type) continue;
      if (c.efa < job.efa_per_node) continue;
      bool labels_match = true;
      for (const auto& [k, v] : job.node_labels) {
        auto l = c.labels->find(k);
        if (l == c.labels->end() || l->second != v) {
          labels_match = false;
          break;
        }
      }
      if (!labels_match) continue;
      if (c.gpu_memory > 0 && c.gpu_memory < job.memory_per_gpu_bytes) {
        shape.largest_too_small = std::max(shape.largest_too_small, c.gpu_memory);
        continue;
      }
      shape.classes.push_back(static_cast<int>(ci));
    }
    return shape;
  }

  // ---- capacity bookkeeping -------------------------------------------------------

  void SetFree(int idx, int free, int raw) {
    ++state_version_;
    WorkerState& s = state_[idx];
    WorkerClass& c = classes_[s.cls];
    if (free != s.free) {
      c.by_free[s.free].erase(idx);
      c.by_free[free].insert(idx);
      s.free = free;
    }
    if (raw != s.raw) {
      --c.raw_count[s.raw];
      ++c.raw_count[raw];
      s.raw = raw;
    }
  }

  // Holds `gpus` of a worker's available GPUs for `job_id`: later jobs in the pass cannot
  // take them. `until` bounds reservation holds (a job ending before it may use them);
  // nullopt marks a hold nobody may use (capacity waiting for a preemption).
  void Hold(int idx, int gpus, int64_t job_id, std::optional<absl::Time> until) {
    WorkerState& s = state_[idx];
    gpus = std::min(gpus, s.free);
    if (gpus <= 0) return;
    if (until) {
      s.res_held += gpus;
      s.res_until = std::min(s.res_until, *until);
    }
    SetFree(idx, s.free - gpus, s.raw);
    WorkerClass& c = classes_[s.cls];
    if (c.holders.empty() || c.holders.back() != job_id) {
      c.holders.push_back(job_id);
      ++holds_version_;
    }
  }

  void Take(int idx, int gpus, const PendingJob& job) {
    WorkerState& s = state_[idx];
    int from_free = std::min(gpus, s.free);
    int from_held = gpus - from_free;  // only a job ending before the reservation
    s.res_held -= from_held;
    SetFree(idx, s.free - from_free, s.raw - gpus);
    s.releases.emplace_back(
        job.expected_duration ? now_ + *job.expected_duration : absl::InfiniteFuture(), gpus);
    s.releases_sorted = false;
  }

  bool Excluded(const PendingJob& job, int idx) const {
    return !job.excluded_workers.empty() && job.excluded_workers.count(order_[idx]->id) > 0;
  }

  bool InShape(const Shape& shape, int cls) const {
    return cls >= 0 && std::binary_search(shape.classes.begin(), shape.classes.end(), cls);
  }

  // Matching, non-excluded workers with at least g in the per-class counts `count(c, f)`
  // and per-worker value `value(state)` (used to discount excluded workers).
  template <typename CountFn, typename ValueFn>
  int CountAtLeast(const PendingJob& job, const Shape& shape, int g, CountFn count,
                   ValueFn value) const {
    int n = 0;
    for (int ci : shape.classes) {
      const WorkerClass& c = classes_[ci];
      for (int f = g; f <= c.max_gpus; ++f) n += count(c, f);
    }
    for (const std::string& id : job.excluded_workers) {
      auto it = index_.find(id);
      if (it == index_.end()) continue;
      const WorkerState& s = state_[it->second];
      if (InShape(shape, s.cls) && value(s) >= g) --n;
    }
    return n;
  }

  int CountFree(const PendingJob& job, const Shape& shape, int g) const {
    return CountAtLeast(
        job, shape, g,
        [](const WorkerClass& c, int f) { return static_cast<int>(c.by_free[f].size()); },
        [](const WorkerState& s) { return s.free; });
  }
  int CountRaw(const PendingJob& job, const Shape& shape, int g) const {
    return CountAtLeast(
        job, shape, g, [](const WorkerClass& c, int f) { return c.raw_count[f]; },
        [](const WorkerState& s) { return s.raw; });
  }
  int CountCapacity(const PendingJob& job, const Shape& shape, int g) const {
    return CountAtLeast(
        job, shape, g, [](const WorkerClass& c, int f) { return c.cap_count[f]; },
        [](const WorkerState& s) { return s.gpus; });
  }

  // ---- one job ------------------------------------------------------------------

  void Consider(const PendingJob& job) {
    const int n = job.nodes;
    const int g = job.gpus_per_node;
    if (n < 1 || g < 1) {
      AddPending(job, PendingCode::kNoMatchingWorkers,
                 absl::StrCat("invalid request: nodes (", n, ") and gpus_per_node (", g,
                              ") must be at least 1"));
      return;
    }
    Shape& shape = ShapeFor(job);
    if (shape.classes.empty()) {
      AddPending(job, PendingCode::kNoMatchingWorkers,
                 shape.largest_too_small > 0
                     ? absl::StrCat(Needs(job, shape), "; no schedulable worker matches (the largest "
                                    "GPUs otherwise matching have ", GiB(shape.largest_too_small), ")")
                     : absl::StrCat(Needs(job, shape), "; no schedulable worker matches"));
      return;
    }
    // Elastic: the gang may start on as few as min_nodes (see scheduler.h).
    const int min_n = job.min_nodes > 0 ? std::min(job.min_nodes, n) : n;
    int capacity = CountCapacity(job, shape, g);
    if (capacity < min_n) {
      AddPending(job, PendingCode::kLargerThanCluster,
                 absl::StrCat(Needs(job, shape), "; only ", capacity, " matching ",
                              capacity == 1 ? "worker has" : "workers have", " ", g,
                              " or more GPUs in total"));
      return;
    }
    const int64_t want = static_cast<int64_t>(n) * g;
    QueueState& queue = QueueFor(job.queue);
    const int64_t quota = queue.quota;
    int64_t& used = queue.used;
    if (min_n < n && quota > 0 && used + want > quota && used + int64_t{min_n} * g <= quota) {
      // An elastic job shrinks to what its quota leaves, down to min_nodes.
      const int k = static_cast<int>((quota - used) / g);
      if (int placed = PlaceElastic(job, shape, k, min_n); placed > 0) {
        used += static_cast<int64_t>(placed) * g;
        return;
      }
      Blocked(job, shape);
      return;
    }
    if (quota > 0 && used + want > quota) {
      AddPending(job, PendingCode::kQuotaExceeded,
                 want > quota ? absl::StrCat("needs ", want, " GPUs, more than queue '", job.queue,
                                             "' may ever hold (quota ", quota, ")")
                              : absl::StrCat("queue '", job.queue, "' holds ", used, " of its ",
                                             quota, " GPU quota; this job needs ", want, " more"));
      return;
    }
    if (Place(job, shape)) {
      used += want;
      return;
    }
    if (min_n < n) {
      if (int placed = PlaceElastic(job, shape, n - 1, min_n); placed > 0) {
        used += static_cast<int64_t>(placed) * g;
        return;
      }
    }
    Blocked(job, shape);
  }

  // An elastic job that does not fit on `nodes`: the most free workers, at most `at_most`
  // and at least `at_least`, best fit; never preemption or reserved GPUs. Returns the
  // nodes placed (0: nothing changed).
  int PlaceElastic(const PendingJob& job, const Shape& shape, int at_most, int at_least) {
    const int g = job.gpus_per_node;
    const int k = std::min(at_most, CountFree(job, shape, g));
    if (k < at_least || k < 1) return 0;
    std::vector<int> chosen;
    chosen.reserve(k);
    FillFree(job, shape, k, &chosen);
    if (static_cast<int>(chosen.size()) < k) return 0;
    Placement p;
    p.job_id = job.job_id;
    for (int idx : chosen) {
      Take(idx, g, job);
      p.allocations.push_back(Allocation{order_[idx]->id, g});
    }
    out_.placements.push_back(std::move(p));
    return k;
  }

  // Best-fit gang placement on available GPUs; false (and no change) when it does not fit.
  bool Place(const PendingJob& job, const Shape& shape) {
    const int n = job.nodes;
    const int g = job.gpus_per_node;
    std::vector<int> chosen;
    if (CountFree(job, shape, g) >= n) {
      chosen.reserve(n);
      FillFree(job, shape, n, &chosen);
    } else if (job.expected_duration && any_reservation_) {
      chosen = PlaceBeforeReservations(job, shape);
    }
    if (static_cast<int>(chosen.size()) < n) return false;
    Placement p;
    p.job_id = job.job_id;
    p.allocations.reserve(n);
    for (int idx : chosen) {
      Take(idx, g, job);
      p.allocations.push_back(Allocation{order_[idx]->id, g});
    }
    out_.placements.push_back(std::move(p));
    return true;
  }

  // Appends available workers with gpus_per_node free GPUs, best fit (fewest free first,
  // then class, then id), until `chosen` holds n.
  void FillFree(const PendingJob& job, const Shape& shape, int n, std::vector<int>* chosen) const {
    const int g = job.gpus_per_node;
    int max_free = 0;
    for (int ci : shape.classes) max_free = std::max(max_free, classes_[ci].max_gpus);
    for (int f = g; f <= max_free && static_cast<int>(chosen->size()) < n; ++f) {
      for (int ci : shape.classes) {
        if (f > classes_[ci].max_gpus) continue;
        for (int idx : classes_[ci].by_free[f]) {
          if (static_cast<int>(chosen->size()) == n) return;
          if (!Excluded(job, idx)) chosen->push_back(idx);
        }
      }
    }
  }

  // EASY backfill: a job known to end before a reservation starts may use its GPUs. Scans
  // the matching workers, so only used for jobs with an expected duration that did not
  // fit otherwise.
  std::vector<int> PlaceBeforeReservations(const PendingJob& job, const Shape& shape) {
    const absl::Time end = now_ + *job.expected_duration;
    const int g = job.gpus_per_node;
    std::vector<std::pair<int, int>> fits;  // (usable GPUs, worker)
    for (int ci : shape.classes) {
      for (int idx : classes_[ci].members) {
        const WorkerState& s = state_[idx];
        int usable = s.free + (end <= s.res_until ? s.res_held : 0);
        if (usable >= g && !Excluded(job, idx)) fits.emplace_back(usable, idx);
      }
    }
    if (static_cast<int>(fits.size()) < job.nodes) return {};
    std::sort(fits.begin(), fits.end());
    std::vector<int> chosen;
    for (int i = 0; i < job.nodes; ++i) chosen.push_back(fits[i].second);
    return chosen;
  }

  void Blocked(const PendingJob& job, Shape& shape) {
    const int n = job.nodes;
    const int g = job.gpus_per_node;
    last_preempt_code_.reset();
    if (WaitForPreempting(job, shape)) return;
    if (config_.preemption && job.priority > min_victim_priority_ && Preempt(job, shape)) {
      return;
    }
    std::optional<absl::Time> estimate;
    std::string reserved;
    const bool starving = now_ - job.queued_since > config_.reservation_after;
    if (starving && reservations_ < config_.max_reservations) {
      ++reservations_;
      std::vector<int> workers;
      estimate = EarliestStart(job, shape, &workers);
      Reserve(job, workers, estimate);
      reserved = absl::StrCat("; waiting since ", Rfc3339(job.queued_since), ", so ",
                              Plural(n, "worker is", "workers are"), " reserved for it");
    } else {
      estimate = CachedEarliestStart(job, shape);
    }
    if (!last_preempt_code_ && CountRaw(job, shape, g) >= n) {
      AddPending(job, PendingCode::kBlockedByReservation,
                 absl::StrCat(Needs(job, shape), "; enough are free, but held for ",
                              Holders(shape, job.job_id, !reserved.empty()), reserved),
                 estimate);
      return;
    }
    PendingCode code = last_preempt_code_.value_or(PendingCode::kInsufficientCapacity);
    std::string message = absl::StrCat(Needs(job, shape), "; ", CountFree(job, shape, g), " match");
    if (code == PendingCode::kPreemptionCooldown) {
      absl::StrAppend(&message, "; lower-priority jobs could make room but were preempted ",
                      "less than ", absl::FormatDuration(config_.preemption_cooldown), " ago");
    }
    absl::StrAppend(&message, reserved);
    AddPending(job, code, std::move(message), estimate);
  }

  // GPUs being freed by jobs already asked to stop count as free: a job they would make
  // fit claims them (so no more victims are picked for it) and waits.
  bool WaitForPreempting(const PendingJob& job, const Shape& shape) {
    const int n = job.nodes;
    const int g = job.gpus_per_node;
    bool any = false;
    for (int ci : shape.classes) any |= !classes_[ci].freeing.empty();
    if (!any) return false;
    // Workers that need freeing GPUs, fewest needed first; then already-free ones.
    std::vector<std::pair<int, int>> helped;  // (GPUs still missing, worker)
    for (int ci : shape.classes) {
      for (int idx : classes_[ci].freeing) {
        const WorkerState& s = state_[idx];
        if (s.free < g && s.freeing > 0 && s.free + s.freeing >= g && !Excluded(job, idx)) {
          helped.emplace_back(g - s.free, idx);
        }
      }
    }
    if (helped.empty()) return false;
    int free_now = CountFree(job, shape, g);
    if (free_now + static_cast<int>(helped.size()) < n) return false;
    std::sort(helped.begin(), helped.end());
    std::vector<int> chosen;
    const int need_helped = n - std::min(free_now, n - 1);  // at least one
    for (int i = 0; i < need_helped; ++i) chosen.push_back(helped[i].second);
    FillFree(job, shape, n, &chosen);
    for (int idx : chosen) {
      WorkerState& s = state_[idx];
      int missing = std::max(0, g - s.free);
      s.freeing -= missing;
      Hold(idx, g, job.job_id, std::nullopt);
    }
    AddPending(job, PendingCode::kWaitingForPreemption,
               absl::StrCat(Needs(job, shape), "; waiting for preempted jobs to stop on ",
                            Plural(need_helped, "worker", "workers")));
    return true;
  }

  static bool Victim(const RunState& r, int priority) {
    return !r.preempting && !r.claimed && !r.cooling && r.priority < priority;
  }

  // Cheapest set of eligible victims on one worker freeing `deficit` GPUs there: exact
  // over every subset when the worker runs few eligible jobs, greedy otherwise.
  // Victims in `taken` are already chosen and do not count.
  std::optional<Cover> CoverWorker(int idx, int deficit, int priority,
                                   const std::set<int>& taken) const {
    constexpr size_t kExactUpTo = 8;
    std::vector<std::pair<int, int>>& cand = scratch_cand_;  // (running index, GPUs here)
    cand.clear();
    int total = 0;
    for (auto [r, gpus] : state_[idx].jobs) {
      if (Victim(run_[r], priority) && (taken.empty() || !taken.count(r))) {
        cand.emplace_back(r, gpus);
        total += gpus;
      }
    }
    if (total < deficit) return std::nullopt;
    std::sort(cand.begin(), cand.end(),
              [this](auto a, auto b) { return run_[a.first].job_id < run_[b.first].job_id; });
    auto finish = [this](Cover c) {
      for (int r : c.victims) c.ids.push_back(run_[r].job_id);
      std::sort(c.ids.begin(), c.ids.end());
      return c;
    };
    auto cost_of = [&](auto&& members) {
      Cover c;
      c.max_priority = std::numeric_limits<int>::min();
      for (int r : members) {
        c.gpus_lost += run_[r].total_gpus;
        c.max_priority = std::max(c.max_priority, run_[r].priority);
        c.oldest_start = std::min(c.oldest_start, run_[r].started);
      }
      return c;
    };
    if (cand.size() <= kExactUpTo) {
      std::optional<Cover> best;
      uint32_t best_mask = 0;
      int members[kExactUpTo];
      for (uint32_t m = 1; m < (1u << cand.size()); ++m) {
        int freed = 0;
        int count = 0;
        for (size_t i = 0; i < cand.size(); ++i) {
          if (m & (1u << i)) {
            freed += cand[i].second;
            members[count++] = cand[i].first;
          }
        }
        if (freed < deficit) continue;
        struct {
          const int* b;
          const int* e;
          const int* begin() const { return b; }
          const int* end() const { return e; }
        } span{members, members + count};
        Cover c = cost_of(span);
        bool better =
            !best || c.gpus_lost < best->gpus_lost ||
            (c.gpus_lost == best->gpus_lost &&
             (c.max_priority < best->max_priority ||
              (c.max_priority == best->max_priority && c.oldest_start > best->oldest_start)));
        if (better) {
          best = std::move(c);
          best_mask = m;
        }
      }
      for (size_t i = 0; i < cand.size(); ++i) {
        if (best_mask & (1u << i)) best->victims.push_back(cand[i].first);
      }
      return finish(std::move(*best));
    }
    // Many small jobs on one worker: greedy, most GPUs freed here per GPU lost first.
    std::sort(cand.begin(), cand.end(), [this](auto a, auto b) {
      int64_t lhs = static_cast<int64_t>(a.second) * run_[b.first].total_gpus;
      int64_t rhs = static_cast<int64_t>(b.second) * run_[a.first].total_gpus;
      if (lhs != rhs) return lhs > rhs;
      return run_[a.first].job_id < run_[b.first].job_id;
    });
    absl::InlinedVector<int, 8> victims;
    int freed = 0;
    for (auto [r, gpus] : cand) {
      if (freed >= deficit) break;
      victims.push_back(r);
      freed += gpus;
    }
    Cover c = cost_of(victims);
    c.victims = std::move(victims);
    return finish(std::move(c));
  }

  // Workers (candidates of the current job) with at least g GPUs once `victims` stop.
  int FitsWith(const std::vector<int>& victims, int g, int free_ok, std::vector<int>* chosen) {
    std::vector<std::pair<int, int>>& freed = scratch_freed_;  // (worker, GPUs freed there)
    freed.clear();
    for (int r : victims) freed.insert(freed.end(), run_allocs_[r].begin(), run_allocs_[r].end());
    std::sort(freed.begin(), freed.end());
    size_t out = 0;  // merge entries of the same worker
    for (size_t i = 0; i < freed.size(); ++i) {
      if (out > 0 && freed[out - 1].first == freed[i].first) {
        freed[out - 1].second += freed[i].second;
      } else {
        freed[out++] = freed[i];
      }
    }
    freed.resize(out);
    int n = free_ok;
    for (auto [idx, gpus] : freed) {
      const WorkerState& s = state_[idx];
      if (s.stamp != stamp_ || s.free >= g) continue;
      if (s.free + gpus >= g) {
        ++n;
        if (chosen) chosen->push_back(idx);
      }
    }
    return n;
  }

  // Preemption. Sets last_preempt_code_ when the job should report a preemption reason.
  bool Preempt(const PendingJob& job, Shape& shape) {
    last_preempt_code_.reset();
    const int n = job.nodes;
    const int g = job.gpus_per_node;
    // A failure for a job with the same selectors, no lower priority, no more nodes and
    // no more GPUs per node means this one fails too: capacity only shrinks in a pass.
    bool must_recheck_cooldown = false;
    for (const PreemptFailure& f : shape.preempt_failures) {
      if (f.priority >= job.priority && f.nodes <= n && f.gpus <= g) {
        if (f.code == PendingCode::kInsufficientCapacity) return false;
        must_recheck_cooldown = true;
      }
    }
    ++stamp_;
    int free_ok = 0;
    // Workers missing GPUs that eligible victims could complete. Their covers (victim
    // sets) are computed lazily, fewest missing GPUs first: a cover loses at least as many
    // GPUs as the worker misses, so once the best cover found is cheaper than what the
    // next worker misses, no later worker can beat it.
    struct Candidate {
      int idx = 0;
      int deficit = 0;          // GPUs missing before any victim is taken
      int min_priority = 0;     // of its eligible victims: no cover has a lower max
      absl::Time latest_start;  // of its eligible victims: no cover starts later
      int cover = -1;           // index into `covers` once computed
      bool done = false;        // enough GPUs freed by victims already taken
    };
    std::vector<std::optional<Cover>> covers;
    std::vector<Candidate> cands;
    int cooldown_ok = 0;
    for (int ci : shape.classes) {
      for (int idx : classes_[ci].members) {
        WorkerState& s = state_[idx];
        if (s.gpus < g || Excluded(job, idx)) continue;
        s.stamp = stamp_;
        if (s.free >= g) {
          ++free_ok;
          ++cooldown_ok;
          continue;
        }
        int lower = 0;     // every lower-priority GPU here, cool-down ignored
        int eligible = 0;  // of those, the ones outside their cool-down
        int min_priority = std::numeric_limits<int>::max();
        absl::Time latest_start = absl::InfinitePast();
        for (auto [r, gpus] : s.jobs) {
          const RunState& rs = run_[r];
          if (!rs.preempting && !rs.claimed && rs.priority < job.priority) {
            lower += gpus;
            if (!rs.cooling) {
              eligible += gpus;
              min_priority = std::min(min_priority, rs.priority);
              latest_start = std::max(latest_start, rs.started);
            }
          }
        }
        if (s.free + lower >= g) ++cooldown_ok;
        if (must_recheck_cooldown || s.free + eligible < g) continue;
        s.cand = static_cast<int>(cands.size());
        cands.push_back(Candidate{idx, g - s.free, min_priority, latest_start});
      }
    }
    auto clear_cands = [&] {
      for (const Candidate& c : cands) state_[c.idx].cand = -1;
    };
    auto fail = [&](PendingCode code) {
      clear_cands();
      // Remember the failure for later jobs of this shape, unless an entry already
      // implies it (keeps the list short: it is checked for every such job).
      constexpr size_t kMaxFailures = 64;
      if (job.excluded_workers.empty() && shape.preempt_failures.size() < kMaxFailures &&
          !(must_recheck_cooldown && code == PendingCode::kPreemptionCooldown)) {
        shape.preempt_failures.push_back({job.priority, n, g, code});
      }
      if (code == PendingCode::kPreemptionCooldown) last_preempt_code_ = code;
      return false;
    };
    if (must_recheck_cooldown || free_ok + static_cast<int>(cands.size()) < n) {
      return fail(cooldown_ok >= n ? PendingCode::kPreemptionCooldown
                                   : PendingCode::kInsufficientCapacity);
    }
    // A min-heap on the candidates' lower bounds: only the few popped are ordered.
    std::vector<int> heap(cands.size());
    for (size_t i = 0; i < heap.size(); ++i) heap[i] = static_cast<int>(i);
    auto later = [&](int a, int b) {  // heap order: true when a comes after b
      const Candidate& x = cands[a];
      const Candidate& y = cands[b];
      if (x.deficit != y.deficit) return x.deficit > y.deficit;
      if (x.min_priority != y.min_priority) return x.min_priority > y.min_priority;
      if (x.latest_start != y.latest_start) return x.latest_start < y.latest_start;
      return x.idx > y.idx;
    };
    std::make_heap(heap.begin(), heap.end(), later);
    // True when `cover` beats anything candidate `c` could offer (ids aside).
    auto beats_bound = [&](const Cover& cover, const Candidate& c) {
      if (cover.gpus_lost != c.deficit) return cover.gpus_lost < c.deficit;
      if (cover.max_priority != c.min_priority) return cover.max_priority < c.min_priority;
      return cover.oldest_start >= c.latest_start;
    };
    // Greedy by marginal cost: repeatedly take the cheapest cover of a worker still
    // missing GPUs, counting victims already taken as free (a multi-node victim frees
    // GPUs on several workers at once), until a whole gang is free.
    std::set<int> taken;
    std::map<int, int> freed;   // worker -> GPUs freed by taken victims
    std::vector<int> computed;  // candidates with a cover, in computing order
    auto compute = [&](int c) {
      Candidate& cand = cands[c];
      if (cand.cover < 0) {
        cand.cover = static_cast<int>(covers.size());
        covers.emplace_back();
        computed.push_back(c);
      }
      auto f = freed.find(cand.idx);
      int deficit = g - state_[cand.idx].free - (f == freed.end() ? 0 : f->second);
      covers[cand.cover] = CoverWorker(cand.idx, deficit, job.priority, taken);
    };
    auto cover_of = [&](int c) -> const std::optional<Cover>& { return covers[cands[c].cover]; };
    auto better = [&](int c, int best) {
      return !cands[c].done && cover_of(c) && (best < 0 || *cover_of(c) < *cover_of(best));
    };
    int satisfied = free_ok;
    while (satisfied < n) {
      int best = -1;
      for (int c : computed) {
        if (better(c, best)) best = c;
      }
      while (!heap.empty()) {
        int c = heap.front();
        if (cands[c].cover < 0) {
          if (best >= 0 && beats_bound(*cover_of(best), cands[c])) break;
          compute(c);
          if (better(c, best)) best = c;
        }
        std::pop_heap(heap.begin(), heap.end(), later);
        heap.pop_back();
      }
      if (best < 0) return fail(PendingCode::kInsufficientCapacity);  // not reached
      std::set<int> touched;
      for (int r : cover_of(best)->victims) {
        taken.insert(r);
        for (auto [idx, gpus] : run_allocs_[r]) {
          freed[idx] += gpus;
          touched.insert(idx);
        }
      }
      for (int idx : touched) {
        const WorkerState& s = state_[idx];
        if (s.stamp != stamp_ || s.cand < 0 || cands[s.cand].done) continue;
        // (s.cand < 0 also covers workers with enough free GPUs: they are not candidates.)
        if (g - s.free - freed[idx] <= 0) {
          cands[s.cand].done = true;
          ++satisfied;
        } else {
          compute(s.cand);  // cheaper now, or computed for the first time
        }
      }
    }
    clear_cands();
    // Drop victims the gang does not need, most expensive first, so the set is minimal.
    std::vector<int> victims(taken.begin(), taken.end());
    std::vector<int> by_cost = victims;
    std::sort(by_cost.begin(), by_cost.end(), [this](int a, int b) {
      if (run_[a].total_gpus != run_[b].total_gpus) return run_[a].total_gpus > run_[b].total_gpus;
      if (run_[a].priority != run_[b].priority) return run_[a].priority > run_[b].priority;
      if (run_[a].started != run_[b].started) return run_[a].started < run_[b].started;
      return run_[a].job_id < run_[b].job_id;
    });
    for (int r : by_cost) {
      std::vector<int> without;
      for (int v : victims) {
        if (v != r) without.push_back(v);
      }
      if (FitsWith(without, g, free_ok, nullptr) >= n) victims = std::move(without);
    }
    std::vector<int> helped;
    FitsWith(victims, g, free_ok, &helped);
    // The gang's workers: those the victims free first, then the fullest free ones.
    std::vector<int> chosen(helped.begin(), helped.begin() + std::min<size_t>(helped.size(), n));
    FillFree(job, shape, n, &chosen);
    std::vector<int64_t> ids;
    for (int r : victims) {
      run_[r].claimed = true;
      ids.push_back(run_[r].job_id);
    }
    std::sort(ids.begin(), ids.end());
    for (int64_t id : ids) out_.preemptions.push_back(Preemption{id, job.job_id});
    for (int idx : chosen) Hold(idx, g, job.job_id, std::nullopt);
    AddPending(job, PendingCode::kWaitingForPreemption,
               absl::StrCat(Needs(job, shape), "; preempting lower-priority ",
                            ids.size() == 1 ? "job " : "jobs ", absl::StrJoin(ids, ", ")));
    return true;
  }

  // The `nodes` matching workers that will have `gpus_per_node` free soonest, and when
  // the last of them will (nullopt when some needed expected_end is unknown). Ties:
  // fewer GPUs missing now, then worker id.
  std::optional<absl::Time> EarliestStart(const PendingJob& job, const Shape& shape,
                                          std::vector<int>* chosen) {
    const int g = job.gpus_per_node;
    std::vector<std::tuple<absl::Time, int, int>> when;  // (time, missing, worker)
    for (int ci : shape.classes) {
      for (int idx : classes_[ci].members) {
        WorkerState& s = state_[idx];
        if (s.gpus < g || Excluded(job, idx)) continue;
        int missing = g - s.free;
        if (missing <= 0) {
          when.emplace_back(now_, 0, idx);
          continue;
        }
        if (!s.releases_sorted) {
          std::sort(s.releases.begin(), s.releases.end());
          s.releases_sorted = true;
        }
        absl::Time t = absl::InfiniteFuture();
        int freed = 0;
        for (auto [end, gpus] : s.releases) {
          freed += gpus;
          if (freed >= missing) {
            t = std::max(end, now_);
            break;
          }
        }
        when.emplace_back(t, missing, idx);
      }
    }
    if (static_cast<int>(when.size()) < job.nodes) return std::nullopt;
    std::partial_sort(when.begin(), when.begin() + job.nodes, when.end());
    absl::Time start = std::get<0>(when[job.nodes - 1]);
    if (chosen) {
      for (int i = 0; i < job.nodes; ++i) chosen->push_back(std::get<2>(when[i]));
    }
    if (start == absl::InfiniteFuture()) return std::nullopt;
    return start;
  }

  // EarliestStart for a job without a reservation. Jobs of the same shape and size see
  // the same answer until capacity changes, so it is computed once per (shape, size,
  // state); at most Config::max_estimates computations per pass.
  std::optional<absl::Time> CachedEarliestStart(const PendingJob& job, const Shape& shape) {
    if (!job.excluded_workers.empty()) {
      if (estimates_ >= config_.max_estimates) return std::nullopt;
      ++estimates_;
      return EarliestStart(job, shape, nullptr);
    }
    uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(job.nodes)) << 32) |
                   static_cast<uint32_t>(job.gpus_per_node);
    auto [it, inserted] = shape.estimates.try_emplace(key);
    Shape::Estimate& e = it->second;
    if (!inserted && e.version == state_version_) return e.start;
    if (estimates_ >= config_.max_estimates) return std::nullopt;
    ++estimates_;
    e.version = state_version_;
    e.start = EarliestStart(job, shape, nullptr);
    return e.start;
  }

  // Holds, on each reserved worker, the available GPUs the job will need at `start`:
  // all of them up to gpus_per_node when the start is unknown; otherwise only what
  // running jobs ending by `start` will not give back.
  void Reserve(const PendingJob& job, const std::vector<int>& workers,
               std::optional<absl::Time> start) {
    const int g = job.gpus_per_node;
    any_reservation_ = true;
    for (int idx : workers) {
      WorkerState& s = state_[idx];
      int hold = std::min(s.free, g);
      if (start) {
        int at_start = s.free;
        for (auto [end, gpus] : s.releases) {
          if (end <= *start) at_start += gpus;
        }
        int spare = std::max(0, std::min(s.free, at_start - g));
        hold = s.free - spare;
      }
      Hold(idx, hold, job.job_id, start.value_or(absl::InfinitePast()));
    }
  }

  // ---- explanations -------------------------------------------------------------

  // NeedsText, cached per shape and size (jobs with exclusions are rare: not cached).
  // The view is valid until the next call.
  absl::string_view Needs(const PendingJob& job, const Shape& shape) const {
    if (!job.excluded_workers.empty()) {
      scratch_needs_ = NeedsText(job);
      return scratch_needs_;
    }
    uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(job.nodes)) << 32) |
                   static_cast<uint32_t>(job.gpus_per_node);
    auto [it, inserted] = shape.needs.try_emplace(key);
    if (inserted) it->second = NeedsText(job);
    return it->second;
  }

  // "needs 3 nodes with 8 free GPUs and instance type p5.48xlarge"
  std::string NeedsText(const PendingJob& job) const {
    std::vector<std::string> extra;
    if (!job.instance_type.empty())
      extra.push_back(absl::StrCat("instance type ", job.instance_type));
    if (job.efa_per_node > 0)
      extra.push_back(Plural(job.efa_per_node, "EFA device", "EFA devices"));
    if (job.memory_per_gpu_bytes > 0)
      extra.push_back(absl::StrCat(GiB(job.memory_per_gpu_bytes), " per GPU (memory estimate)"));
    if (!job.node_labels.empty()) {
      extra.push_back(absl::StrCat(job.node_labels.size() == 1 ? "label " : "labels ",
                                   absl::StrJoin(job.node_labels, ",", absl::PairFormatter("="))));
    }
    std::string s = absl::StrCat("needs ", Plural(job.nodes, "node", "nodes"), " with ",
                                 Plural(job.gpus_per_node, "free GPU", "free GPUs"));
    for (size_t i = 0; i < extra.size(); ++i) {
      absl::StrAppend(&s, i + 1 == extra.size() ? " and " : ", ", extra[i]);
    }
    if (!job.excluded_workers.empty()) {
      absl::StrAppend(&s, " (",
                      Plural(static_cast<int>(job.excluded_workers.size()), "worker", "workers"),
                      " excluded after node faults)");
    }
    return s;
  }

  // "job 4" or "jobs 4, 7, 9, 12, 20 and 3 more": who holds capacity this job could use.
  // Cached per shape until the next hold, unless the job holds capacity itself.
  const std::string& Holders(Shape& shape, int64_t self, bool self_holds) {
    if (self_holds) {
      scratch_text_ = HoldersText(shape, self);
      return scratch_text_;
    }
    if (shape.holders_version != holds_version_) {
      shape.holders_text = HoldersText(shape, self);
      shape.holders_version = holds_version_;
    }
    return shape.holders_text;
  }

  std::string HoldersText(const Shape& shape, int64_t self) const {
    std::set<int64_t> ids;
    for (int ci : shape.classes) {
      for (int64_t id : classes_[ci].holders) {
        if (id != self) ids.insert(id);
      }
    }
    std::vector<int64_t> first(ids.begin(), ids.end());
    std::string more;
    if (first.size() > 5) {
      more = absl::StrCat(" and ", first.size() - 5, " more");
      first.resize(5);
    }
    return absl::StrCat(first.size() == 1 ? "job " : "jobs ", absl::StrJoin(first, ", "), more);
  }

  void AddPending(const PendingJob& job, PendingCode code, std::string message,
                  std::optional<absl::Time> estimate = std::nullopt) {
    last_preempt_code_.reset();
    Pending p;
    p.job_id = job.job_id;
    p.code = code;
    p.message = std::move(message);
    p.estimated_start = estimate;
    out_.pending.push_back(std::move(p));
    pending_queue_.push_back(&job.queue);
  }

  // Constant for the pass.
  const Config& config_;
  const std::vector<const PendingJob*>& pending_;
  const std::vector<Worker>& workers_;
  const std::vector<RunningJob>& running_;
  const std::map<std::string, QueueConfig>& queues_;
  const absl::Time now_;

  // Built by IndexWorkers/IndexRunning, then updated as the pass places and holds.
  std::vector<const Worker*> order_;  // worker index -> worker, by id
  std::unordered_map<std::string, int> index_;
  std::vector<WorkerState> state_;
  std::vector<WorkerClass> classes_;
  std::vector<RunState> run_;
  std::vector<absl::InlinedVector<std::pair<int, int>, 2>> run_allocs_;  // (worker, GPUs)
  std::unordered_map<ShapeKey, Shape, ShapeKeyHash> shapes_;
  std::unordered_map<std::string, QueueState> queue_state_;
  int min_victim_priority_ = 0;
  bool any_reservation_ = false;
  int reservations_ = 0;
  int estimates_ = 0;
  uint64_t state_version_ = 1;  // bumped on every change of a worker's free GPUs
  uint32_t stamp_ = 0;
  std::optional<PendingCode> last_preempt_code_;
  uint64_t holds_version_ = 0;
  std::string scratch_text_;
  mutable std::vector<std::pair<int, int>> scratch_cand_;  // CoverWorker's candidates
  std::vector<std::pair<int, int>> scratch_freed_;         // FitsWith's tally
  mutable std::string scratch_needs_;                      // Needs() for jobs with exclusions

  Decisions out_;
  std::vector<const std::string*> pending_queue_;  // parallel to out_.pending
};

}  // namespace

Scheduler::Scheduler(Config config) : config_(std::move(config)) {}

Decisions Scheduler::Schedule(const std::vector<PendingJob>& pending,
                              const std::vector<Worker>& workers,
                              const std::vector<RunningJob>& running,
                              const std::map<std::string, QueueConfig>& queues,
                              absl::Time now) const {
  std::vector<const PendingJob*> jobs;
  jobs.reserve(pending.size());
  for (const PendingJob& j : pending) jobs.push_back(&j);
  return Schedule(jobs, workers, running, queues, now);
}

Decisions Scheduler::Schedule(const std::vector<const PendingJob*>& pending,
                              const std::vector<Worker>& workers,
                              const std::vector<RunningJob>& running,
                              const std::map<std::string, QueueConfig>& queues,
                              absl::Time now) const {
  return Pass(config_, pending, workers, running, queues, now).Run();
}

}  // namespace llamafleet::sched
