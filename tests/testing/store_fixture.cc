#include "tests/testing/store_fixture.h"

#include <utility>
#include <vector>

#include "jobspec/jobspec.h"

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

}  // namespace llamafleet::testing
