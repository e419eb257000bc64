#ifndef LLAMAFLEET_TESTS_TESTING_STORE_FIXTURE_H_
#define LLAMAFLEET_TESTS_TESTING_STORE_FIXTURE_H_

// The fixture of tests whose subject is the store: a JobStore (and the cluster, credential
// and drain tables it carries) on a real SQLite file in a fresh temporary directory, timed
// by a fake clock the test advances.

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>

#include "common/clock.h"
#include "llamafleet/v1/job.pb.h"
#include "storage/job_store.h"
#include "tests/testing/process.h"

namespace llamafleet::testing {

class StoreTest : public ::testing::Test {
 protected:
  // The database file, in dir_ (it need not exist yet).
  std::string Path() const { return dir_.path() + "/coordinator.db"; }
  // Options for Path() timed by clock_; tests change the others they care about.
  JobStoreOptions Options();
  // Opens (or reopens) the database; nullptr, with a failure of the test, if it cannot.
  std::unique_ptr<JobStore> Open(const JobStoreOptions& options);
  std::unique_ptr<JobStore> Open() { return Open(Options()); }
  // Submits `spec` with defaults applied as `owner`; its id (0, with a failure, if refused).
  static int64_t SubmitSpec(JobStore* store, v1::JobSpec spec, const std::string& owner = "alice",
                            const std::string& idempotency_key = "");

  // Submits a job named `name` and starts its attempt 1 on worker "w1" (one task, one
  // rank), RUNNING; its id (0, with a failure of the test, if the store refuses).
  static int64_t RunningJob(JobStore* store, const std::string& name = "running");

  TempDir dir_;
  FakeClock clock_;
};

}  // namespace llamafleet::testing

#endif  // LLAMAFLEET_TESTS_TESTING_STORE_FIXTURE_H_
