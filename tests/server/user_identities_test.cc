// Which Unix identity each API user's jobs run as (server/identity_config.h,
// server/user_identities.h, storage/identity_store.h): the `users:` mapping and its
// validation, table by table, each refusal naming its field; dynamic uids stable per user
// across restarts, one per user under concurrent first submissions, and a full range
// refused with the fix; and the migration that adds the table.
#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/identity_config.h"
#include "server/user_identities.h"
#include "storage/identity_store.h"
#include "storage/job_store.h"
#include "storage/schema.h"
#include "tests/testing/spec_builder.h"
#include "tests/testing/store_fixture.h"
#include "yaml-cpp/yaml.h"

namespace llamafleet {
namespace {

// The schema that added user_identities (the migration's number; see storage/schema.cc).
constexpr int kIdentitySchema = 11;

TEST(UidRangeTest, ParsesFirstLastOrNoneAndNamesTheFieldOtherwise) {
  absl::StatusOr<std::optional<UidRange>> r = ParseUidRange("61184-65519", "--dynamic-uid-range");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ((*r)->first, 61184u);
  EXPECT_EQ((*r)->last, 65519u);
  r = ParseUidRange("none", "dynamic_uid_range");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->has_value());
  for (const char* bad : {"", "61184", "65519-61184", "0-10", "999-2000", "a-b", "1000-2147483647", "1-2-3"}) {
    absl::StatusOr<std::optional<UidRange>> refused = ParseUidRange(bad, "dynamic_uid_range");
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_TRUE(absl::StartsWith(refused.status().message(), "dynamic_uid_range: ")) << refused.status();
  }
  EXPECT_TRUE(kDefaultDynamicUids.Contains(61184) && kDefaultDynamicUids.Contains(65519));
}

absl::StatusOr<std::map<std::string, v1::RunIdentity>> Users(const std::string& yaml) {
  return ParseUsersConfig(YAML::Load(yaml));
}

TEST(UsersConfigTest, MapsUsersByNameOrUidWithAnOptionalSharedGroup) {
  absl::StatusOr<std::map<std::string, v1::RunIdentity>> users = Users(R"yaml(
alice: {uid: 2001, gid: 2001}
bob: {user: nobody}
carol: {uid: 2002, gid: 2002, group: 3000}
dave: {uid: 2003, gid: 2003, group: 3000, dir_mode: "0770"}
erin: {uid: 2004, gid: 2004, dir_mode: "0700"}
)yaml");
  ASSERT_TRUE(users.ok()) << users.status();
  const v1::RunIdentity& alice = users->at("alice");
  EXPECT_EQ(alice.uid(), 2001u);
  EXPECT_EQ(alice.gid(), 2001u);
  EXPECT_EQ(alice.groups_size(), 0);
  EXPECT_EQ(alice.dir_mode(), 0700u);
  EXPECT_FALSE(alice.dynamic());
  EXPECT_FALSE(alice.name().empty());
  const v1::RunIdentity& bob = users->at("bob");  // Debian's nobody: 65534:65534
  EXPECT_EQ(bob.name(), "nobody");
  EXPECT_EQ(bob.uid(), 65534u);
  // A shared group is what files are created with; the user's own gid stays supplementary.
  const v1::RunIdentity& carol = users->at("carol");
  EXPECT_EQ(carol.gid(), 3000u);
  ASSERT_EQ(carol.groups_size(), 1);
  EXPECT_EQ(carol.groups(0), 2002u);
  EXPECT_EQ(carol.dir_mode(), 0750u);
  EXPECT_EQ(users->at("dave").dir_mode(), 0770u);
  EXPECT_EQ(users->at("erin").dir_mode(), 0700u);
  EXPECT_TRUE(Users("").ok());
}

TEST(UsersConfigTest, RefusesEachMistakeNamingItsField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"alice: {uid: 0, gid: 10}", "users.alice.uid: 0 is root's"},
      {"alice: {uid: 10, gid: 0}", "users.alice.gid: 0 is root's"},
      {"alice: {uid: 10}", "users.alice: expected user, or uid and gid"},
      {"alice: {uid: x, gid: 10}", "users.alice.uid: expected a number"},
      {"alice: {uid: 10, gid: 10, shell: /bin/sh}", "users.alice.shell: unknown key"},
      {"alice: {user: no-such-user-llamafleet}", "users.alice.user: no user 'no-such-user-llamafleet'"},
      {"alice: {user: root}", "users.alice.user: root"},
      {"alice: {user: nobody, uid: 7, gid: 7}", "users.alice: give user or uid and gid, not both"},
      {"alice: {uid: 10, gid: 10, group: no-such-group-llamafleet}", "users.alice.group: no group"},
      {"alice: {uid: 10, gid: 10, group: 0}", "users.alice.group: 0 is root's"},
      {"alice: {uid: 10, gid: 10, group: 30, dir_mode: \"0777\"}", "users.alice.dir_mode: expected"},
      {"alice: {uid: 10, gid: 10, dir_mode: \"0750\"}", "users.alice.dir_mode: a mode that shares with a group"},
      {"alice: 7", "users.alice: expected a mapping"},
      {"\"al ice\": {uid: 10, gid: 10}", "users.al ice must be"},
      {"[alice]", "users: expected a mapping"},
  };
  for (const auto& [yaml, want] : cases) {
    absl::StatusOr<std::map<std::string, v1::RunIdentity>> users = Users(yaml);
    EXPECT_EQ(users.status().code(), absl::StatusCode::kInvalidArgument) << yaml;
    EXPECT_TRUE(absl::StartsWith(users.status().message(), want)) << yaml << " -> " << users.status();
  }
  // A mapped uid inside the dynamic range would be handed to someone else too.
  IdentityConfig config;
  config.users = *Users("alice: {uid: 61200, gid: 61200}");
  absl::Status s = ValidateIdentityConfig(config);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(s.message(), "users.alice.uid: 61200 is inside the dynamic uid range 61184-65519"))
      << s;
  config.dynamic = UidRange{70000, 70010};
  EXPECT_TRUE(ValidateIdentityConfig(config).ok());
}

class UserIdentitiesTest : public testing::StoreTest {
 protected:
  std::unique_ptr<UserIdentities> Load(JobStore* store, IdentityConfig config) {
    absl::StatusOr<std::unique_ptr<UserIdentities>> ids = UserIdentities::Load(store, std::move(config));
    EXPECT_TRUE(ids.ok()) << ids.status();
    return ids.ok() ? std::move(*ids) : nullptr;
  }
};

TEST_F(UserIdentitiesTest, DynamicUidsAreStablePerUserAcrossRestartsAndMappedUsersKeepTheirs) {
  IdentityConfig config;
  config.users = *Users("alice: {uid: 2001, gid: 2001}");
  config.dynamic = UidRange{70000, 70010};
  {
    std::unique_ptr<JobStore> store = Open();
    std::unique_ptr<UserIdentities> ids = Load(store.get(), config);
    EXPECT_FALSE(ids->Find("bob").has_value()) << "none before the first submission";
    absl::StatusOr<v1::RunIdentity> bob = ids->Ensure("bob");
    ASSERT_TRUE(bob.ok()) << bob.status();
    EXPECT_EQ(bob->uid(), 70000u);
    EXPECT_EQ(bob->gid(), 70000u);
    EXPECT_EQ(bob->name(), "llamafleet-70000");
    EXPECT_EQ(bob->dir_mode(), 0700u);
    EXPECT_TRUE(bob->dynamic());
    EXPECT_EQ(ids->Ensure("bob")->uid(), 70000u) << "the same user, the same uid";
    EXPECT_EQ(ids->Ensure("carol")->uid(), 70001u);
    EXPECT_EQ(ids->Find("carol")->uid(), 70001u);
    absl::StatusOr<v1::RunIdentity> alice = ids->Ensure("alice");
    ASSERT_TRUE(alice.ok());
    EXPECT_EQ(alice->uid(), 2001u);
    EXPECT_FALSE(alice->dynamic());
    EXPECT_TRUE(ids->Check("dave").ok());
    EXPECT_FALSE(ids->Find("dave").has_value()) << "a check records nothing";
  }
  // A restart, the range widened and moved: recorded users keep their uids.
  config.dynamic = UidRange{69990, 70100};
  std::unique_ptr<JobStore> store = Open();
  std::unique_ptr<UserIdentities> ids = Load(store.get(), config);
  EXPECT_EQ(ids->Find("bob")->uid(), 70000u);
  EXPECT_EQ(ids->Find("carol")->uid(), 70001u);
  EXPECT_EQ(ids->Ensure("dave")->uid(), 69990u);
  EXPECT_NE(ids->Describe().find("3 recorded"), std::string::npos) << ids->Describe();
}

TEST_F(UserIdentitiesTest, AFullRangeIsRefusedWithTheFixAndRecordsNothing) {
  std::unique_ptr<JobStore> store = Open();
  IdentityConfig config;
  config.dynamic = UidRange{70000, 70001};
  std::unique_ptr<UserIdentities> ids = Load(store.get(), config);
  ASSERT_TRUE(ids->Ensure("u1").ok());
  ASSERT_TRUE(ids->Ensure("u2").ok());
  for (const absl::Status& s : {ids->Ensure("u3").status(), ids->Check("u3")}) {
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
    EXPECT_NE(s.message().find("no dynamic uid left for user u3"), std::string::npos) << s;
    EXPECT_NE(s.message().find("70000-70001"), std::string::npos) << s;
    EXPECT_NE(s.message().find("widen --dynamic-uid-range"), std::string::npos) << s;
  }
  absl::StatusOr<std::map<std::string, uint32_t>> recorded = ListDynamicUids(store.get());
  ASSERT_TRUE(recorded.ok());
  EXPECT_EQ(recorded->size(), 2u);
  // Dynamic uids off: a user without a mapping is refused, naming where to map them.
  config.dynamic.reset();
  std::unique_ptr<UserIdentities> strict = Load(store.get(), config);
  absl::Status s = strict->Ensure("u9").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("users.u9"), std::string::npos) << s;
}

TEST_F(UserIdentitiesTest, ConcurrentFirstSubmissionsGetOneUidPerUserAndNoUidTwice) {
  std::unique_ptr<JobStore> store = Open();
  IdentityConfig config;
  config.dynamic = UidRange{70000, 70100};
  std::unique_ptr<UserIdentities> ids = Load(store.get(), config);
  absl::Mutex mu;
  std::map<std::string, std::set<uint32_t>> got;
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int u = 0; u < 10; ++u) {
        const std::string user = absl::StrCat("user", (u + t) % 10);
        absl::StatusOr<v1::RunIdentity> id = ids->Ensure(user);
        ASSERT_TRUE(id.ok()) << id.status();
        absl::MutexLock lock(&mu);
        got[user].insert(id->uid());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  std::set<uint32_t> all;
  for (const auto& [user, uids] : got) {
    EXPECT_EQ(uids.size(), 1u) << user << " got several uids";
    all.insert(uids.begin(), uids.end());
  }
  EXPECT_EQ(all.size(), 10u) << "two users share a uid";
}

TEST_F(UserIdentitiesTest, AMappedUidRecordedForAnotherUserRefusesToLoad) {
  std::unique_ptr<JobStore> store = Open();
  IdentityConfig config;
  config.dynamic = UidRange{70000, 70010};
  ASSERT_EQ(Load(store.get(), config)->Ensure("bob")->uid(), 70000u);
  config.users = *Users("alice: {uid: 70000, gid: 70000}");
  config.dynamic = UidRange{80000, 80010};
  absl::StatusOr<std::unique_ptr<UserIdentities>> ids = UserIdentities::Load(store.get(), config);
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StartsWith(ids.status().message(), "users.alice.uid: 70000 is the dynamic uid recorded for user bob"))
      << ids.status();
}

TEST_F(UserIdentitiesTest, OwnersOfUnfinishedJobsGetTheirsAtStart) {
  std::unique_ptr<JobStore> store = Open();
  const v1::JobSpec spec = testing::SpecBuilder("queued-before-identities").WithDefaults();
  ASSERT_TRUE(store->SubmitJobsAndWait({SubmitJobInput{spec, "erin", ""}, SubmitJobInput{spec, "fred", ""}}).ok());
  IdentityConfig config;
  config.dynamic = UidRange{70000, 70000};
  std::unique_ptr<UserIdentities> ids = Load(store.get(), config);
  const std::vector<std::string> refusals = ids->EnsureActiveOwners();
  EXPECT_EQ(ids->Find("erin")->uid(), 70000u);
  ASSERT_EQ(refusals.size(), 1u) << "fred finds the range full";
  EXPECT_NE(refusals[0].find("no dynamic uid left for user fred"), std::string::npos) << refusals[0];
}

// A database of the schema before user_identities migrates: the table is there, empty,
// and takes uids.
TEST_F(UserIdentitiesTest, MigrationAddsTheTable) {
  ASSERT_GE(CurrentSchemaVersion(), kIdentitySchema);
  {
    std::unique_ptr<JobStore> store = Open();
    SubmitSpec(store.get(), testing::SpecBuilder("old").Build(), "erin");
  }
  {
    absl::StatusOr<std::unique_ptr<sqlite::Connection>> conn =
        sqlite::Connection::Open(Path(), false, false);
    ASSERT_TRUE(conn.ok()) << conn.status();
    // Back to the schema before it: what it and every later migration added goes.
    ASSERT_TRUE((*conn)
                    ->Exec(absl::StrCat("DROP TABLE user_identities; DROP TABLE deleted_job_dirs;",
                                        "DROP INDEX worker_credentials_by_join_token;",
                                        "ALTER TABLE worker_credentials DROP COLUMN join_token_sha256;",
                                        "ALTER TABLE jobs DROP COLUMN submitted_spec; ALTER TABLE jobs DROP COLUMN derived_from; ALTER TABLE job_evals DROP COLUMN eval_set;",
                                        "PRAGMA user_version = ", kIdentitySchema - 1, ";"))
                    .ok());
  }
  std::unique_ptr<JobStore> store = Open();
  ASSERT_NE(store, nullptr);
  absl::StatusOr<std::map<std::string, uint32_t>> recorded = ListDynamicUids(store.get());
  ASSERT_TRUE(recorded.ok()) << recorded.status();
  EXPECT_TRUE(recorded->empty());
  absl::StatusOr<std::vector<std::string>> owners = ListActiveOwners(store.get());
  ASSERT_TRUE(owners.ok());
  EXPECT_EQ(*owners, std::vector<std::string>{"erin"});
  IdentityConfig config;
  config.dynamic = UidRange{70000, 70010};
  EXPECT_EQ(Load(store.get(), config)->Ensure("erin")->uid(), 70000u);
}

}  // namespace
}  // namespace llamafleet
