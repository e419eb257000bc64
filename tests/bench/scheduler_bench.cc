// Scheduler benchmark: the pure pass, no coordinator, no I/O.
//
//   scheduler_bench [--workers 1000] [--gpus 8] [--pending 10000] [--runs 21]
//                   [--ticks 200] [--tick-minutes 1] [--seed 1] [--no-preemption]
//                   [--reservation-after MINUTES] [--no-baseline]
//
// 1. Full pass: R passes over the same snapshot (10,000 pending jobs of mixed sizes,
//    priorities, selectors and queues; 1,000 workers x 8 GPUs about 70% busy). Prints
//    median/p90, and the same figures for a naive baseline measured in the same run
//    (first fit, scanning every worker per job, no reservations, preemption or
//    explanations), since these machines are shared and noisy.
// 2. Sustained admissions: a simulated cluster driven pass by pass (fake time,
//    --tick-minutes apart): running jobs end, preempted jobs are requeued, the queue is
//    topped up to --pending, and each pass's placements start. Prints gang admissions per
//    second of scheduler time (wall and CPU), and of wall time including the simulation.
//
// Wall and thread-CPU figures are both printed: on a shared machine the gap between them
// is time spent waiting for a core.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <map>
#include <random>
#include <unordered_map>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "scheduler/scheduler.h"

namespace llamafleet::sched {
namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// CPU time of this thread: on a shared, busy machine it leaves out the time the thread
// waited for a core, which wall time does not.
double ThreadCpuMs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

struct Generator {
  std::mt19937_64 rng;
  absl::Time now = absl::FromUnixSeconds(1700000000);
  int64_t next_id = 1;

  int Uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }
  bool Chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; }

  static const char* Type(int i) {
    static const char* kTypes[] = {"p5.48xlarge", "p4d.24xlarge", "g5.48xlarge"};
    return kTypes[i];
  }
  static int Efa(int type) { return type == 0 ? 32 : type == 1 ? 4 : 0; }

  std::vector<Worker> Workers(int n, int gpus) {
    std::vector<Worker> workers;
    for (int i = 0; i < n; ++i) {
      Worker w;
      w.id = absl::StrCat("worker-", i);
      int type = i % 10 < 5 ? 0 : i % 10 < 8 ? 1 : 2;
      w.instance_type = Type(type);
      w.efa = Efa(type);
      w.labels = {{"zone", std::string(1, static_cast<char>('a' + i % 3))}};
      w.gpus = gpus;
      workers.push_back(std::move(w));
    }
    return workers;
  }

  PendingJob Job(absl::Time queued) {
    PendingJob j;
    j.job_id = next_id++;
    int q = Uniform(0, 4);
    j.queue = absl::StrCat("team-", q);
    int p = Uniform(0, 99);
    j.priority = p < 60 ? 0 : p < 85 ? 1 : p < 97 ? 2 : 3;
    j.queued_since = queued;
    int size = Uniform(0, 99);
    if (size < 50) {
      j.gpus_per_node = 1 << Uniform(0, 2);  // 1, 2, 4
    } else if (size < 75) {
      j.gpus_per_node = 8;
    } else if (size < 90) {
      j.nodes = Uniform(2, 4);
      j.gpus_per_node = 8;
    } else if (size < 98) {
      j.nodes = Uniform(8, 16);
      j.gpus_per_node = 8;
    } else {
      j.nodes = 32;
      j.gpus_per_node = 8;
    }
    if (Chance(0.6)) {
      int type = Uniform(0, 2);
      j.instance_type = Type(type);
      if (j.nodes > 1 && Efa(type) > 0) j.efa_per_node = Efa(type);
    }
    if (Chance(0.2))
      j.node_labels = {{"zone", std::string(1, static_cast<char>('a' + Uniform(0, 2)))}};
    if (Chance(0.1)) j.expected_duration = absl::Minutes(Uniform(5, 60));
    return j;
  }

  absl::Duration Runtime() { return absl::Minutes(Uniform(5, 90)); }
};

// The baseline: what a first version typically does. First fit over every worker for
// every job, in priority/FIFO order; no reservations, preemption or explanations.
int NaiveFirstFit(const std::vector<PendingJob>& pending, const std::vector<Worker>& workers,
                  const std::vector<RunningJob>& running) {
  std::unordered_map<std::string, int> free;
  for (const Worker& w : workers) free[w.id] = w.gpus;
  for (const RunningJob& r : running) {
    for (const Allocation& a : r.allocations) free[a.worker_id] -= a.gpus;
  }
  std::vector<const PendingJob*> order;
  for (const PendingJob& j : pending) order.push_back(&j);
  std::sort(order.begin(), order.end(), [](const PendingJob* a, const PendingJob* b) {
    return std::tie(b->priority, a->queued_since, a->job_id) <
           std::tie(a->priority, b->queued_since, b->job_id);
  });
  int placed = 0;
  std::vector<const Worker*> chosen;
  for (const PendingJob* j : order) {
    chosen.clear();
    for (const Worker& w : workers) {
      if (free[w.id] < j->gpus_per_node) continue;
      if (!j->instance_type.empty() && w.instance_type != j->instance_type) continue;
      if (w.efa < j->efa_per_node) continue;
      bool ok = true;
      for (const auto& [k, v] : j->node_labels) {
        auto it = w.labels.find(k);
        ok = ok && it != w.labels.end() && it->second == v;
      }
      if (!ok) continue;
      chosen.push_back(&w);
      if (static_cast<int>(chosen.size()) == j->nodes) break;
    }
    if (static_cast<int>(chosen.size()) < j->nodes) continue;
    for (const Worker* w : chosen) free[w->id] -= j->gpus_per_node;
    ++placed;
  }
  return placed;
}

// Fills the cluster to about `fill` of its GPUs with running jobs of mixed sizes.
std::vector<RunningJob> Fill(Generator& gen, const std::vector<Worker>& workers, double fill) {
  std::vector<RunningJob> running;
  std::vector<int> free(workers.size());
  int64_t total = 0;
  for (size_t i = 0; i < workers.size(); ++i) total += free[i] = workers[i].gpus;
  int64_t used = 0;
  while (used < fill * total) {
    int g = 1 << gen.Uniform(0, 3);
    int nodes = g == 8 && gen.Chance(0.3) ? gen.Uniform(2, 4) : 1;
    RunningJob r;
    r.job_id = 1000000 + gen.next_id++;
    r.queue = absl::StrCat("team-", gen.Uniform(0, 4));
    r.priority = gen.Uniform(0, 2);
    r.started = gen.now - absl::Minutes(gen.Uniform(1, 300));
    if (gen.Chance(0.8)) r.expected_end = gen.now + absl::Minutes(gen.Uniform(1, 360));
    int start = gen.Uniform(0, static_cast<int>(workers.size()) - 1);
    for (size_t k = 0; k < workers.size() && static_cast<int>(r.allocations.size()) < nodes; ++k) {
      size_t i = (start + k) % workers.size();
      if (free[i] >= g) {
        free[i] -= g;
        r.allocations.push_back(Allocation{workers[i].id, g});
      }
    }
    if (r.allocations.empty()) break;
    used += static_cast<int64_t>(g) * r.allocations.size();
    running.push_back(std::move(r));
  }
  return running;
}

void Percentiles(const char* name, std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  std::printf("%-30s median %8.2f ms   p90 %8.2f ms   min %8.2f ms   (%zu runs)\n", name,
              ms[ms.size() / 2], ms[ms.size() * 9 / 10], ms.front(), ms.size());
}

int Main(int argc, char** argv) {
  CLI::App app("Scheduler benchmark: one full pass, and sustained gang admissions");
  int num_workers = 1000;
  int gpus = 8;
  int num_pending = 10000;
  int runs = 21;
  int ticks = 200;
  uint64_t seed = 1;
  app.add_option("--workers", num_workers, "workers")->check(CLI::PositiveNumber);
  app.add_option("--gpus", gpus, "GPUs per worker")->check(CLI::PositiveNumber);
  app.add_option("--pending", num_pending, "queued jobs")->check(CLI::PositiveNumber);
  app.add_option("--runs", runs, "full passes to time")->check(CLI::PositiveNumber);
  app.add_option("--ticks", ticks, "simulated minutes in the sustained run")
      ->check(CLI::PositiveNumber);
  app.add_option("--seed", seed, "random seed");
  int tick_minutes = 1;
  app.add_option("--tick-minutes", tick_minutes, "simulated minutes between sustained passes")
      ->check(CLI::PositiveNumber);
  Config config;
  app.add_flag("!--no-preemption", config.preemption, "turn preemption off");
  int reservation_after_min = 30;
  bool baseline = true;
  app.add_flag("!--no-baseline", baseline, "skip the naive baseline");
  app.add_option("--reservation-after", reservation_after_min, "minutes before a reservation");
  CLI11_PARSE(app, argc, argv);

  Generator gen{std::mt19937_64(seed)};
  std::vector<Worker> workers = gen.Workers(num_workers, gpus);
  std::vector<RunningJob> running = Fill(gen, workers, 0.7);
  std::vector<PendingJob> pending;
  for (int i = 0; i < num_pending; ++i) {
    pending.push_back(gen.Job(gen.now - absl::Minutes(gen.Uniform(0, 120))));
  }
  std::map<std::string, QueueConfig> queues = {
      {"team-0", {2000}}, {"team-1", {1500}}, {"team-2", {0}}, {"team-3", {0}}, {"team-4", {800}}};
  config.reservation_after = absl::Minutes(reservation_after_min);
  Scheduler scheduler{config};

  // ---- 1. one full pass ----
  std::printf("full pass: %d pending jobs, %d workers x %d GPUs, %zu running jobs\n", num_pending,
              num_workers, gpus, running.size());
  std::vector<double> pass_ms, pass_cpu_ms, naive_ms;
  Decisions d;
  int naive_placed = 0;
  for (int r = 0; r < runs; ++r) {
    double c0 = ThreadCpuMs();
    auto t0 = Clock::now();
    d = scheduler.Schedule(pending, workers, running, queues, gen.now);
    auto t1 = Clock::now();
    pass_cpu_ms.push_back(ThreadCpuMs() - c0);
    if (baseline) naive_placed = NaiveFirstFit(pending, workers, running);
    auto t2 = Clock::now();
    pass_ms.push_back(Ms(t1 - t0));
    naive_ms.push_back(Ms(t2 - t1));
  }
  std::map<PendingCode, int> codes;
  int estimated = 0;
  for (const Pending& p : d.pending) {
    ++codes[p.code];
    estimated += p.estimated_start.has_value();
  }
  std::printf("  decisions: %zu placed, %zu preemptions, %zu pending (", d.placements.size(),
              d.preemptions.size(), d.pending.size());
  const char* sep = "";
  for (auto [code, n] : codes) {
    std::printf("%s%s %d", sep, PendingCodeName(code), n);
    sep = ", ";
  }
  std::printf("); %d with an estimated start\n", estimated);
  Percentiles("  scheduler pass", pass_ms);
  Percentiles("  scheduler pass (CPU time)", pass_cpu_ms);
  if (baseline) {
    Percentiles("  naive first-fit baseline", naive_ms);
    std::sort(pass_ms.begin(), pass_ms.end());
    std::sort(naive_ms.begin(), naive_ms.end());
    std::printf(
        "  ratio scheduler/baseline (medians): %.2f  (baseline placed %d, no "
        "reservations/preemption/explanations)\n",
        pass_ms[pass_ms.size() / 2] / naive_ms[naive_ms.size() / 2], naive_placed);
  }

  // ---- 2. sustained admissions ----
  std::unordered_map<int64_t, absl::Duration> runtime;
  std::unordered_map<int64_t, PendingJob> spec;
  for (const PendingJob& j : pending) runtime[j.job_id] = gen.Runtime();
  for (RunningJob& r : running) {
    absl::Time end = r.expected_end.value_or(gen.now + absl::Minutes(gen.Uniform(1, 360)));
    runtime[r.job_id] = end - r.started;
  }
  int64_t admissions = 0, preemptions = 0;
  double sched_ms = 0, sched_cpu_ms = 0;
  std::vector<double> tick_ms, tick_cpu_ms;
  auto wall0 = Clock::now();
  for (int tick = 0; tick < ticks; ++tick) {
    gen.now += absl::Minutes(tick_minutes);
    std::vector<RunningJob> still;
    for (RunningJob& r : running) {
      if (r.preempting) {
        PendingJob again = spec[r.job_id];
        again.last_preempted = gen.now;
        pending.push_back(again);
      } else if (r.started + runtime[r.job_id] > gen.now) {
        still.push_back(std::move(r));
      }
    }
    running = std::move(still);
    while (static_cast<int>(pending.size()) < num_pending) {
      pending.push_back(gen.Job(gen.now));
      runtime[pending.back().job_id] = gen.Runtime();
    }
    double c0 = ThreadCpuMs();
    auto t0 = Clock::now();
    Decisions dec = scheduler.Schedule(pending, workers, running, queues, gen.now);
    double ms = Ms(Clock::now() - t0);
    double cpu_ms = ThreadCpuMs() - c0;
    sched_ms += ms;
    sched_cpu_ms += cpu_ms;
    tick_ms.push_back(ms);
    tick_cpu_ms.push_back(cpu_ms);
    admissions += dec.placements.size();
    preemptions += dec.preemptions.size();
    std::unordered_map<int64_t, const Placement*> placed;
    for (const Placement& p : dec.placements) placed[p.job_id] = &p;
    std::vector<PendingJob> left;
    for (PendingJob& j : pending) {
      auto it = placed.find(j.job_id);
      if (it == placed.end()) {
        left.push_back(std::move(j));
        continue;
      }
      RunningJob r;
      r.job_id = j.job_id;
      r.queue = j.queue;
      r.priority = j.priority;
      r.allocations = it->second->allocations;
      r.started = gen.now;
      r.last_preempted = j.last_preempted;
      r.expected_end = gen.now + runtime[j.job_id];
      spec[j.job_id] = j;
      running.push_back(std::move(r));
    }
    pending = std::move(left);
    std::unordered_map<int64_t, bool> victims;
    for (const Preemption& p : dec.preemptions) victims[p.victim_job_id] = true;
    for (RunningJob& r : running) {
      if (victims.count(r.job_id)) {
        r.preempting = true;
        if (!spec.count(r.job_id)) {  // started before the benchmark: make it requeueable
          PendingJob j;
          j.job_id = r.job_id;
          j.queue = r.queue;
          j.priority = r.priority;
          j.queued_since = r.started;
          j.nodes = static_cast<int>(r.allocations.size());
          j.gpus_per_node = r.allocations[0].gpus;
          spec[r.job_id] = j;
        }
      }
    }
  }
  double wall_ms = Ms(Clock::now() - wall0);
  std::printf("sustained: %d passes, %d simulated minute(s) apart, queue kept at %d jobs\n", ticks,
              tick_minutes, num_pending);
  std::printf("  %lld gang admissions, %lld preemptions\n", static_cast<long long>(admissions),
              static_cast<long long>(preemptions));
  Percentiles("  pass while sustained", tick_ms);
  Percentiles("  pass while sustained (CPU)", tick_cpu_ms);
  std::printf("  admissions/s of scheduler time: %.0f (of its CPU time: %.0f)\n",
              admissions / (sched_ms / 1000), admissions / (sched_cpu_ms / 1000));
  std::printf("  admissions/s of wall time (with simulation): %.0f\n",
              admissions / (wall_ms / 1000));
  return 0;
}

}  // namespace
}  // namespace llamafleet::sched

int main(int argc, char** argv) { return llamafleet::sched::Main(argc, argv); }
