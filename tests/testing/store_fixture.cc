#include "tests/testing/store_fixture.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "jobspec/jobspec.h"
#include "storage/cluster_store.h"
#include "tests/testing/spec_builder.h"

namespace llamafleet::testing {

JobStoreOptions StoreTest::Options() {
  JobStoreOptions o;
  o.path = Path();
  o.clock = &clock_;
  return o;
}

std::unique_ptr<JobStore> StoreTest::Open(const JobStoreOptions& options) {
  absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(options);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(*store) : nullptr;
}

int64_t StoreTest::SubmitSpec(JobStore* store, v1::JobSpec spec, const std::string& owner,
                              const std::string& idempotency_key) {
  ApplyDefaults(&spec);
  absl::StatusOr<std::vector<SubmitJobResult>> r =
      store->SubmitJobsAndWait({SubmitJobInput{std::move(spec), owner, idempotency_key}});
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok() || r->empty()) return 0;
  return std::stoll((*r)[0].job.id());
}

int64_t StoreTest::RunningJob(JobStore* store, const std::string& name) {
  const int64_t job = SubmitSpec(store, SpecBuilder(name).Build());
  AttemptRecord a;
  a.job_id = job;
  a.attempt = 1;
  a.master_addr = "10.0.0.1";
  a.master_port = 29500;
  a.tasks.push_back(TaskRecord{absl::StrCat(job, "-1-0"), 0, "w1", 1, v1::TASK_STARTING});
  absl::Status started = store->WriteAndWait(StartAttemptTxn(std::move(a)));
  EXPECT_TRUE(started.ok()) << started;
  absl::Status running = store->WriteAndWait(AttemptRunningTxn(job, 1));
  EXPECT_TRUE(running.ok()) << running;
  return started.ok() && running.ok() ? job : 0;
}

}  // namespace llamafleet::testing
