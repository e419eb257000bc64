// The drains table: an operator's drain of a known worker, undrain, the errors that name
// what is wrong, a coordinator's clear that leaves an operator's drain alone, and drains
// surviving a reopen (a coordinator restart).
#include "storage/worker_drain_store.h"

#include <gtest/gtest.h>

#include "storage/cluster_store.h"
#include "tests/testing/store_fixture.h"

namespace llamafleet {
namespace {

class WorkerDrainStoreTest : public testing::StoreTest {
 protected:
  std::unique_ptr<JobStore> Open() {
    JobStoreOptions o = Options();
    o.synchronous_full = false;
    return StoreTest::Open(o);
  }
};

TEST_F(WorkerDrainStoreTest, OperatorsDrainAndUndrainKnownWorkers) {
  std::unique_ptr<JobStore> store = Open();
  ASSERT_NE(store, nullptr);
  v1::Inventory inv;
  inv.set_cpu_ranks(1);
  ASSERT_TRUE(store->WriteAndWait(UpsertWorkerTxn("w1", inv, v1::WORKER_READY)).ok());

  absl::Status s = DrainWorker(store.get(), "nosuch", "x");
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_EQ(s.message(), "no worker named nosuch has registered");
  s = DrainWorker(store.get(), "w1", "");
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("--reason"), std::string::npos);
  ASSERT_TRUE(DrainWorker(store.get(), "w1", "bad DIMM").ok());

  absl::StatusOr<std::map<std::string, WorkerDrainRecord>> drains = ListWorkerDrains(*store);
  ASSERT_TRUE(drains.ok());
  ASSERT_EQ(drains->size(), 1u);
  EXPECT_EQ(drains->at("w1").reason, "bad DIMM");
  EXPECT_EQ(drains->at("w1").source, "operator");
  EXPECT_GT(drains->at("w1").since, absl::UnixEpoch());

  // A passing pre-flight's clear does not end an operator's drain.
  ASSERT_TRUE(store->WriteAndWait(ClearWorkerDrainTxn("w1", "preflight")).ok());
  EXPECT_EQ(ListWorkerDrains(*store)->size(), 1u);

  store.reset();
  store = Open();  // durable across restarts
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(ListWorkerDrains(*store)->size(), 1u);
  ASSERT_TRUE(UndrainWorker(store.get(), "w1").ok());
  EXPECT_TRUE(ListWorkerDrains(*store)->empty());
  s = UndrainWorker(store.get(), "w1");
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_EQ(s.message(), "worker w1 is not drained");
}

TEST_F(WorkerDrainStoreTest, CoordinatorDrainsKeepTheirTime) {
  std::unique_ptr<JobStore> store = Open();
  ASSERT_NE(store, nullptr);
  const absl::Time t = absl::FromUnixSeconds(1700000000);
  ASSERT_TRUE(store->WriteAndWait(SetWorkerDrainTxn({"w2", "pre-flight failed: gemm", "preflight", t})).ok());
  absl::StatusOr<std::map<std::string, WorkerDrainRecord>> drains = ListWorkerDrains(*store);
  ASSERT_TRUE(drains.ok());
  EXPECT_EQ(drains->at("w2"), (WorkerDrainRecord{"w2", "pre-flight failed: gemm", "preflight", t}));
  ASSERT_TRUE(store->WriteAndWait(ClearWorkerDrainTxn("w2", "preflight")).ok());
  EXPECT_TRUE(ListWorkerDrains(*store)->empty());
}

}  // namespace
}  // namespace llamafleet
