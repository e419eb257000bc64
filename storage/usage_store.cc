#include "storage/usage_store.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "google/protobuf/util/time_util.h"
#include "storage/sqlite.h"
#include "storage/txn_helpers.h"

namespace llamafleet {
namespace {

using google::protobuf::util::TimeUtil;
using storage_internal::EachRow;

constexpr int kFailedState = 2;   // attempts.state: failed
constexpr int kStoppedState = 3;  // attempts.state: stopped (cancelled, preempted, resized)

// Slot-hour prices by worker name, from the workers table's inventories as rows bring them.
class WorkerPrices {
 public:
  explicit WorkerPrices(const PriceTable& pricing) : pricing_(pricing) {}
  // `inventory`: the workers row's blob; `known` false when the task's worker has no row.
  std::optional<double> Of(const std::string& worker, bool known, const std::string& inventory) {
    if (pricing_.empty() || !known) return std::nullopt;
    auto it = cache_.find(worker);
    if (it != cache_.end()) return it->second;
    v1::Inventory inv;
    std::optional<double> price;
    if (inv.ParseFromString(inventory)) price = SlotHourPrice(inv, pricing_);
    cache_.emplace(worker, price);
    return price;
  }

 private:
  const PriceTable& pricing_;
  std::map<std::string, std::optional<double>> cache_;
};

double SecondsBetween(int64_t start_us, int64_t end_us) {
  return static_cast<double>(std::max<int64_t>(0, end_us - start_us)) / 1e6;
}

void SetCost(sqlite::Statement& st, int i, const std::optional<double>& cost) {
  if (cost.has_value()) {
    st.BindDouble(i, *cost);
  } else {
    st.BindNull(i);
  }
}

}  // namespace

bool IsFailedUsage(int state, const std::string& failure_class) {
  return state == kFailedState || (state == kStoppedState && failure_class == "preempted");
}

std::optional<double> SlotHourPrice(const v1::Inventory& inventory, const PriceTable& pricing) {
  // Slots as the scheduler counts them (WorkerSlots, server/cluster/scheduler_input.h).
  const int slots = inventory.gpus_size() > 0 ? inventory.gpus_size() : inventory.cpu_ranks();
  auto it = pricing.find(inventory.instance_type());
  if (slots <= 0 || it == pricing.end()) return std::nullopt;
  return it->second / slots;
}

void AttemptMeter::AddTask(int64_t ranks, std::optional<double> slot_hour_price) {
  any_ = true;
  ranks_ += std::max<int64_t>(0, ranks);
  if (!slot_hour_price.has_value()) {
    priced_ = false;
    return;
  }
  price_per_hour_ += static_cast<double>(std::max<int64_t>(0, ranks)) * *slot_hour_price;
}

AttemptUsage AttemptMeter::Measure(double seconds, bool failed) const {
  AttemptUsage u;
  seconds = std::max(0.0, seconds);
  u.gpu_seconds = static_cast<double>(ranks_) * seconds;
  if (any_ && priced_) u.cost = price_per_hour_ * seconds / 3600.0;
  u.failed = failed;
  return u;
}

void AddAttemptUsage(const AttemptUsage& attempt, v1::Usage* sum) {
  sum->set_gpu_seconds(sum->gpu_seconds() + attempt.gpu_seconds);
  if (attempt.failed) sum->set_failed_gpu_seconds(sum->failed_gpu_seconds() + attempt.gpu_seconds);
  if (!attempt.cost.has_value()) return;
  sum->set_cost(sum->cost() + *attempt.cost);
  sum->set_failed_cost(sum->failed_cost() + (attempt.failed ? *attempt.cost : 0.0));
}

void AddUsage(const v1::Usage& add, v1::Usage* sum) {
  sum->set_gpu_seconds(sum->gpu_seconds() + add.gpu_seconds());
  sum->set_failed_gpu_seconds(sum->failed_gpu_seconds() + add.failed_gpu_seconds());
  if (add.has_cost()) sum->set_cost(sum->cost() + add.cost());
  if (add.has_failed_cost() || add.has_cost()) sum->set_failed_cost(sum->failed_cost() + add.failed_cost());
}

absl::Status RecordAttemptUsage(Txn& txn, int64_t job_id, int attempt, const PriceTable& pricing) {
  LF_ASSIGN_OR_RETURN(
      auto* head,
      txn.Statement(
          "SELECT a.state, a.failure_class, a.start_us, a.end_us, j.owner, j.queue FROM attempts a "
          "JOIN jobs j ON j.id = a.job_id WHERE a.job_id = ?1 AND a.attempt = ?2"));
  head->Bind(1, job_id).Bind(2, int64_t{attempt});
  LF_ASSIGN_OR_RETURN(bool found, head->Step());
  if (!found) {
    head->Reset();
    return absl::NotFoundError(absl::StrCat("job ", job_id, " has no attempt ", attempt));
  }
  const bool failed = IsFailedUsage(static_cast<int>(head->ColumnInt(0)), head->ColumnText(1));
  const double seconds = SecondsBetween(head->ColumnInt(2), head->ColumnInt(3));
  const std::string owner = head->ColumnText(4), queue = head->ColumnText(5);
  head->Reset();

  LF_ASSIGN_OR_RETURN(
      auto* tasks,
      txn.Statement(
          "SELECT t.worker, t.ranks, w.name IS NOT NULL, w.inventory FROM tasks t "
          "LEFT JOIN workers w ON w.name = t.worker WHERE t.job_id = ?1 AND t.attempt = ?2"));
  tasks->Bind(1, job_id).Bind(2, int64_t{attempt});
  WorkerPrices prices(pricing);
  AttemptMeter meter;
  absl::Status s = EachRow(*tasks, [&](sqlite::Statement& row) {
    meter.AddTask(row.ColumnInt(1), prices.Of(row.ColumnText(0), row.ColumnInt(2) != 0, row.ColumnText(3)));
    return absl::OkStatus();
  });
  tasks->Reset();
  if (!s.ok()) return s;
  const AttemptUsage used = meter.Measure(seconds, failed);

  LF_ASSIGN_OR_RETURN(
      auto* update,
      txn.Statement(
          "UPDATE attempts SET gpu_seconds = ?3, cost = ?4 WHERE job_id = ?1 AND attempt = ?2"));
  update->Bind(1, job_id).Bind(2, int64_t{attempt}).BindDouble(3, used.gpu_seconds);
  SetCost(*update, 4, used.cost);
  LF_RETURN_IF_ERROR(update->Run());

  LF_ASSIGN_OR_RETURN(
      auto* totals,
      txn.Statement(
          "INSERT INTO usage_totals (user, queue, jobs, gpu_seconds, failed_gpu_seconds, cost, "
          "failed_cost) "
          "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (user, queue) DO UPDATE SET "
          "jobs = jobs + excluded.jobs, gpu_seconds = gpu_seconds + excluded.gpu_seconds, "
          "failed_gpu_seconds = failed_gpu_seconds + excluded.failed_gpu_seconds, "
          "cost = CASE WHEN excluded.cost IS NULL THEN cost ELSE COALESCE(cost, 0) + excluded.cost "
          "END, "
          "failed_cost = CASE WHEN excluded.failed_cost IS NULL THEN failed_cost "
          "ELSE COALESCE(failed_cost, 0) + excluded.failed_cost END"));
  totals->Bind(1, owner).Bind(2, queue).Bind(3, int64_t{attempt == 1 ? 1 : 0});
  totals->BindDouble(4, used.gpu_seconds).BindDouble(5, used.failed ? used.gpu_seconds : 0.0);
  SetCost(*totals, 6, used.cost);
  SetCost(
      *totals, 7,
      used.cost.has_value() ? std::optional<double>(used.failed ? *used.cost : 0.0) : std::nullopt);
  return totals->Run();
}

absl::StatusOr<std::map<int64_t, v1::Usage>> ReadJobUsage(JobStore& store, const std::vector<int64_t>& job_ids,
                                                          const PriceTable& pricing, absl::Time now) {
  std::map<int64_t, v1::Usage> out;
  for (int64_t id : job_ids) out[id];
  if (job_ids.empty()) return out;
  const int64_t now_us = absl::ToUnixMicros(now);
  LF_RETURN_IF_ERROR(store.Read([&](sqlite::Connection& conn) -> absl::Status {
    // One row per ended attempt; one per task of an active attempt (consecutive rows).
    LF_ASSIGN_OR_RETURN(
        sqlite::Statement q,
        conn.Prepare(absl::StrCat(
            "SELECT a.job_id, a.attempt, a.state, a.failure_class, a.gpu_seconds, a.cost, "
            "a.start_us, "
            "t.worker, t.ranks, w.name IS NOT NULL, w.inventory FROM attempts a "
            "LEFT JOIN tasks t ON a.state = 0 AND t.job_id = a.job_id AND t.attempt = a.attempt "
            "LEFT JOIN workers w ON w.name = t.worker "
            "WHERE a.job_id IN (",
            absl::StrJoin(job_ids, ","), ") ORDER BY a.job_id, a.attempt")));
    WorkerPrices prices(pricing);
    // The active attempt being summed: its job, number, start and tasks so far.
    int64_t active_job = 0, active_start = 0;
    int active_attempt = 0;
    AttemptMeter meter;
    auto flush = [&] {
      if (active_attempt == 0) return;
      AddAttemptUsage(meter.Measure(SecondsBetween(active_start, now_us), false), &out[active_job]);
      active_attempt = 0;
      meter = AttemptMeter();
    };
    absl::Status rows = EachRow(q, [&](sqlite::Statement& row) {
      const int64_t job = row.ColumnInt(0);
      const int attempt = static_cast<int>(row.ColumnInt(1));
      const int state = static_cast<int>(row.ColumnInt(2));
      if (active_attempt != 0 && (job != active_job || attempt != active_attempt)) flush();
      if (state != 0) {
        AttemptUsage a;
        a.gpu_seconds = row.ColumnDouble(4);
        if (!row.ColumnIsNull(5)) a.cost = row.ColumnDouble(5);
        a.failed = IsFailedUsage(state, row.ColumnText(3));
        AddAttemptUsage(a, &out[job]);
        return absl::OkStatus();
      }
      active_job = job;
      active_attempt = attempt;
      active_start = row.ColumnInt(6);
      if (!row.ColumnIsNull(7)) {
        meter.AddTask(row.ColumnInt(8),
                      prices.Of(row.ColumnText(7), row.ColumnInt(9) != 0, row.ColumnText(10)));
      }
      return absl::OkStatus();
    });
    flush();
    return rows;
  }));
  return out;
}

absl::Status AddActiveAttemptUsage(JobStore& store, const PriceTable& pricing, absl::Time now,
                                   std::vector<v1::Attempt>* attempts) {
  std::vector<std::string> workers;
  for (const v1::Attempt& a : *attempts) {
    if (a.state() != v1::ATTEMPT_ACTIVE) continue;
    for (const v1::AttemptTask& t : a.tasks()) workers.push_back(t.worker());
  }
  if (workers.empty()) return absl::OkStatus();
  // The active attempts' workers' inventories (none to read without prices).
  std::map<std::string, std::string> inventories;
  if (!pricing.empty()) {
    LF_RETURN_IF_ERROR(store.Read([&](sqlite::Connection& conn) -> absl::Status {
      LF_ASSIGN_OR_RETURN(sqlite::Statement q,
                          conn.Prepare("SELECT inventory FROM workers WHERE name = ?1"));
      for (const std::string& w : workers) {
        if (inventories.count(w)) continue;
        q.Bind(1, w);
        LF_ASSIGN_OR_RETURN(bool row, q.Step());
        if (row) inventories[w] = q.ColumnText(0);
        q.Reset();
      }
      return absl::OkStatus();
    }));
  }
  WorkerPrices prices(pricing);
  for (v1::Attempt& a : *attempts) {
    if (a.state() != v1::ATTEMPT_ACTIVE) continue;
    AttemptMeter meter;
    for (const v1::AttemptTask& t : a.tasks()) {
      auto inv = inventories.find(t.worker());
      meter.AddTask(t.ranks(), prices.Of(t.worker(), inv != inventories.end(),
                                          inv == inventories.end() ? "" : inv->second));
    }
    const double seconds =
        std::max(0.0, absl::ToDoubleSeconds(now - absl::FromUnixMicros(TimeUtil::TimestampToMicroseconds(a.start_time()))));
    const AttemptUsage used = meter.Measure(seconds, false);
    a.set_gpu_seconds(used.gpu_seconds);
    if (used.cost.has_value()) {
      a.set_cost(*used.cost);
    } else {
      a.clear_cost();
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::UsageRow>> ReadUsageRows(JobStore& store, const std::string& user,
                                                        const PriceTable& pricing, absl::Time now) {
  std::map<std::pair<std::string, std::string>, v1::UsageRow> rows;
  auto row_of = [&rows](const std::string& u, const std::string& q) -> v1::UsageRow& {
    v1::UsageRow& r = rows[{u, q}];
    r.set_user(u);
    r.set_queue(q);
    return r;
  };
  const int64_t now_us = absl::ToUnixMicros(now);
  LF_RETURN_IF_ERROR(store.Read([&](sqlite::Connection& conn) -> absl::Status {
    // One statement, so the totals and the active attempts are one snapshot: an attempt
    // that ends meanwhile is counted once, in one or the other.
    LF_ASSIGN_OR_RETURN(
        sqlite::Statement q,
        conn.Prepare(
            "SELECT 0, user, queue, jobs, gpu_seconds, failed_gpu_seconds, cost, failed_cost, "
            "0, 0, 0, '', 0, 0, NULL FROM usage_totals WHERE ?1 = '' OR user = ?1 "
            "UNION ALL "
            "SELECT 1, j.owner, j.queue, 0, 0, 0, NULL, NULL, a.job_id, a.attempt, a.start_us, "
            "t.worker, "
            "t.ranks, w.name IS NOT NULL, w.inventory FROM attempts a JOIN jobs j ON j.id = "
            "a.job_id "
            "JOIN tasks t ON t.job_id = a.job_id AND t.attempt = a.attempt "
            "LEFT JOIN workers w ON w.name = t.worker WHERE a.state = 0 AND (?1 = '' OR j.owner = "
            "?1)"));
    q.Bind(1, user);
    WorkerPrices prices(pricing);
    struct Active {
      std::string user, queue;
      int attempt = 0;
      int64_t start_us = 0;
      AttemptMeter meter;
    };
    std::map<std::pair<int64_t, int>, Active> active;
    LF_RETURN_IF_ERROR(EachRow(q, [&](sqlite::Statement& r) {
      if (r.ColumnInt(0) == 0) {
        v1::UsageRow& row = row_of(r.ColumnText(1), r.ColumnText(2));
        row.set_jobs(row.jobs() + r.ColumnInt(3));
        v1::Usage total;
        total.set_gpu_seconds(r.ColumnDouble(4));
        total.set_failed_gpu_seconds(r.ColumnDouble(5));
        if (!r.ColumnIsNull(6)) total.set_cost(r.ColumnDouble(6));
        if (!r.ColumnIsNull(7)) total.set_failed_cost(r.ColumnDouble(7));
        AddUsage(total, row.mutable_usage());
        return absl::OkStatus();
      }
      Active& a = active[{r.ColumnInt(8), static_cast<int>(r.ColumnInt(9))}];
      a.user = r.ColumnText(1);
      a.queue = r.ColumnText(2);
      a.attempt = static_cast<int>(r.ColumnInt(9));
      a.start_us = r.ColumnInt(10);
      a.meter.AddTask(r.ColumnInt(12),
                      prices.Of(r.ColumnText(11), r.ColumnInt(13) != 0, r.ColumnText(14)));
      return absl::OkStatus();
    }));
    for (const auto& [key, a] : active) {
      v1::UsageRow& row = row_of(a.user, a.queue);
      if (a.attempt == 1) row.set_jobs(row.jobs() + 1);
      AddAttemptUsage(a.meter.Measure(SecondsBetween(a.start_us, now_us), false),
                      row.mutable_usage());
    }
    return absl::OkStatus();
  }));
  std::vector<v1::UsageRow> out;
  out.reserve(rows.size());
  for (auto& [key, row] : rows) out.push_back(std::move(row));
  return out;
}

}  // namespace llamafleet
