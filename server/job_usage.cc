// JobServiceImpl's GPU time and cost: GetUsage, and the usage GetJob, ListJobs and
// ListQueues add to what they return (storage/usage_store.h says how it is measured).
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "server/job_service.h"
#include "server/job_service_internal.h"

namespace llamafleet {

using job_service_internal::FinishNow;

absl::Status JobServiceImpl::AddJobUsage(const std::vector<v1::Job*>& jobs) const {
  std::vector<int64_t> ids;
  ids.reserve(jobs.size());
  for (const v1::Job* job : jobs) {
    int64_t id;
    if (absl::SimpleAtoi(job->id(), &id)) ids.push_back(id);
  }
  if (ids.empty()) return absl::OkStatus();
  absl::StatusOr<std::map<int64_t, v1::Usage>> usage = ReadJobUsage(*store_, ids, pricing_, store_->clock()->Now());
  if (!usage.ok()) return usage.status();
  for (v1::Job* job : jobs) {
    int64_t id;
    if (!absl::SimpleAtoi(job->id(), &id)) continue;
    if (auto it = usage->find(id); it != usage->end()) *job->mutable_usage() = std::move(it->second);
  }
  return absl::OkStatus();
}

absl::Status JobServiceImpl::AddQueueUsage(std::map<std::string, v1::Queue>* queues) const {
  absl::StatusOr<std::vector<v1::UsageRow>> rows = ReadUsageRows(*store_, "", pricing_, store_->clock()->Now());
  if (!rows.ok()) return rows.status();
  for (const v1::UsageRow& row : *rows) {
    auto it = queues->find(row.queue());
    if (it != queues->end()) AddUsage(row.usage(), it->second.mutable_usage());
  }
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* JobServiceImpl::GetUsage(grpc::CallbackServerContext* context,
                                                   const v1::GetUsageRequest* request,
                                                   v1::GetUsageResponse* response) {
  if (absl::StatusOr<Principal> caller = auth_->Check(*context, Operation::kRead); !caller.ok()) {
    return FinishNow(context, caller.status());
  }
  absl::StatusOr<std::vector<v1::UsageRow>> rows =
      ReadUsageRows(*store_, request->user(), pricing_, store_->clock()->Now());
  if (!rows.ok()) return FinishNow(context, rows.status());
  for (v1::UsageRow& row : *rows) *response->add_rows() = std::move(row);
  for (const auto& [type, price] : pricing_) (*response->mutable_pricing())[type] = price;
  return FinishNow(context, grpc::Status::OK);
}

}  // namespace llamafleet
