#ifndef LLAMAFLEET_TESTS_STORAGE_JOB_STORE_FIXTURE_H_
#define LLAMAFLEET_TESTS_STORAGE_JOB_STORE_FIXTURE_H_

// The fixture of the JobStore suites (job_store_test, job_store_file_test): the shared
// store fixture plus submissions of named jobs in the "default" queue.

#include <unistd.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "storage/job_store.h"
#include "tests/testing/spec_builder.h"
#include "tests/testing/store_fixture.h"

namespace llamafleet {

using ::llamafleet::testing::SpecBuilder;

// The job `name` of `owner`, defaults applied, as the coordinator hands it to the store.
inline SubmitJobInput Input(const std::string& name, const std::string& owner = "alice",
                            const std::string& key = "") {
  return SubmitJobInput{SpecBuilder(name).Queue("default").WithDefaults(), owner, key};
}

class JobStoreTest : public testing::StoreTest {
 protected:
  using StoreTest::Open;
  // In a forked child: the store at `o`, or exit code 3.
  static std::unique_ptr<JobStore> OpenOrExit(const JobStoreOptions& o) {
    absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(o);
    if (!store.ok()) _exit(3);
    return std::move(*store);
  }
  int64_t SubmitOne(JobStore* store, SubmitJobInput in) {
    absl::StatusOr<std::vector<SubmitJobResult>> r = store->SubmitJobsAndWait({std::move(in)});
    EXPECT_TRUE(r.ok()) << r.status();
    return std::stoll((*r)[0].job.id());
  }
};

}  // namespace llamafleet

#endif  // LLAMAFLEET_TESTS_STORAGE_JOB_STORE_FIXTURE_H_
