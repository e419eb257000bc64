// NF4 quantization (worker/trainer/nf4.h) against tests/trainer/nf4_reference.py, an
// independent numpy implementation of the QLoRA paper's definition: codes, first-level
// absmax codes, second-level scales, the offset and the dequantized values, bit for bit,
// on random and real-shaped tensors, blocks of zeros and sizes not divisible by 64.
#include "nf4.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tests/testing/process.h"

namespace llamafleet::trainer {
namespace {

using testing::ReadFile;
using testing::TempDir;

template <typename T>
std::vector<T> ReadArray(const std::string& path) {
  const std::string bytes = ReadFile(path);
  std::vector<T> out(bytes.size() / sizeof(T));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
  return out;
}

// Runs the reference on x and checks every output of QuantizeNf4/DequantizeNf4 against it.
void ExpectMatchesReference(const std::vector<float>& x, const std::string& what) {
  SCOPED_TRACE(what);
  TempDir dir;
  const std::string in = dir.path() + "/in.f32", out = dir.path() + "/out";
  std::ofstream(in, std::ios::binary)
      .write(reinterpret_cast<const char*>(x.data()), static_cast<std::streamsize>(x.size() * 4));
  const std::string command =
      std::string(LLAMAFLEET_SYSTEM_PYTHON) + " " + LLAMAFLEET_NF4_REFERENCE + " " + in + " " + out;
  ASSERT_EQ(std::system(command.c_str()), 0) << command;

  absl::StatusOr<Nf4Tensor> q = QuantizeNf4(x.data(), static_cast<int64_t>(x.size()));
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->codes, ReadArray<uint8_t>(out + ".codes"));
  EXPECT_EQ(q->absmax_codes, ReadArray<uint8_t>(out + ".absmax_codes"));
  const std::vector<float> scales = ReadArray<float>(out + ".scales");
  ASSERT_EQ(q->absmax_scales.size(), scales.size());
  EXPECT_EQ(std::memcmp(q->absmax_scales.data(), scales.data(), scales.size() * 4), 0);
  const std::vector<float> offset = ReadArray<float>(out + ".offset");
  ASSERT_EQ(offset.size(), 1u);
  EXPECT_EQ(std::memcmp(&q->absmax_offset, offset.data(), 4), 0)
      << q->absmax_offset << " vs " << offset[0];
  std::vector<float> deq(x.size());
  DequantizeNf4(*q, deq.data());
  const std::vector<float> expected = ReadArray<float>(out + ".dequant");
  ASSERT_EQ(expected.size(), deq.size());
  EXPECT_EQ(std::memcmp(deq.data(), expected.data(), deq.size() * 4), 0);
  EXPECT_EQ(static_cast<int64_t>(q->codes.size() + q->absmax_codes.size() +
                                 4 * q->absmax_scales.size() + 4),
            Nf4StorageBytes(static_cast<int64_t>(x.size())));
}

std::vector<float> Normal(size_t n, float stddev, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> x(n);
  for (float& v : x) v = dist(rng);
  return x;
}

TEST(Nf4Test, TablesAreThePublishedOnes) {
  const auto& levels = Nf4Levels();
  EXPECT_EQ(levels.front(), -1.0f);
  EXPECT_EQ(levels[7], 0.0f);
  EXPECT_EQ(levels.back(), 1.0f);
  const auto& map = DynamicMap8();
  EXPECT_TRUE(std::is_sorted(map.begin(), map.end()));
  EXPECT_EQ(map.back(), 1.0f);
  EXPECT_NE(std::find(map.begin(), map.end(), 0.0f), map.end());
  EXPECT_GT(map.front(), -1.0f);  // the signed map's most negative value is -0.99297
}

TEST(Nf4Test, SmallAndOddSizesMatchTheReference) {
  for (size_t n : {1, 2, 63, 64, 65, 127, 1000, 64 * 256, 64 * 256 * 3 + 17}) {
    ExpectMatchesReference(Normal(n, 0.02f, static_cast<uint32_t>(n)),
                           "normal n=" + std::to_string(n));
  }
}

TEST(Nf4Test, ZerosOutliersAndTiesMatchTheReference) {
  std::vector<float> x = Normal(64 * 300 + 5, 1.0f, 7);
  for (int i = 64 * 3; i < 64 * 4; ++i) x[i] = 0.0f;  // a block of zeros
  x[64 * 5] = -0.0f;
  x[1000] = 300.0f;  // an outlier: its block codes the rest near 0
  for (int i = 64 * 10; i < 64 * 11; ++i) x[i] = 0.5f;  // every value its block's absmax
  // Exact halfway points between two levels, in a block whose absmax is 1: the largest
  // float coded k, found by stepping from the midpoint of the float levels.
  const auto& levels = Nf4Levels();
  auto code_of = [](float y) {
    const float pair[2] = {1.0f, y};
    return QuantizeNf4(pair, 2)->codes[0] & 0x0F;
  };
  for (int i = 64 * 20; i < 64 * 21; ++i) x[i] = 0.0f;
  x[64 * 20] = 1.0f;
  for (int k = 0; k < 15; ++k) {
    float y = static_cast<float>((static_cast<double>(levels[k]) + levels[k + 1]) / 2);
    while (code_of(y) > k) y = std::nextafter(y, -2.0f);
    while (code_of(std::nextafter(y, 2.0f)) == k) y = std::nextafter(y, 2.0f);
    x[64 * 20 + 1 + k] = y;
  }
  ExpectMatchesReference(x, "zeros, outliers, halfway points");
  std::vector<float> zeros(200, 0.0f);
  ExpectMatchesReference(zeros, "all zeros");
}

TEST(Nf4Test, ARealShapedWeightMatchesTheReference) {
  // 1024 rows of Llama-2-7B's 4096-wide q_proj rows, at its initialization's scale.
  ExpectMatchesReference(Normal(size_t{1024} * 4096, 0.02f, 42), "1024 x 4096");
}

TEST(Nf4Test, RoundTripErrorIsWithinHalfALevelGapOfEachBlock) {
  const std::vector<float> x = Normal(64 * 1000, 0.02f, 3);
  absl::StatusOr<Nf4Tensor> q = QuantizeNf4(x.data(), static_cast<int64_t>(x.size()));
  ASSERT_TRUE(q.ok());
  std::vector<float> deq(x.size());
  DequantizeNf4(*q, deq.data());
  double err2 = 0, x2 = 0;
  for (size_t b = 0; b < x.size() / 64; ++b) {
    float absmax = 0;
    for (size_t i = b * 64; i < b * 64 + 64; ++i) absmax = std::max(absmax, std::fabs(x[i]));
    // Half the widest level gap (-0.6962 - -1) of the block's absmax, plus what double
    // quantization moved the absmax by (levels are at most 1).
    const float stored =
        DynamicMap8()[q->absmax_codes[b]] * q->absmax_scales[b / kNf4ScaleBlock] + q->absmax_offset;
    const float bound = absmax * 0.15191f + std::fabs(stored - absmax) + 1e-7f;
    for (size_t i = b * 64; i < b * 64 + 64; ++i) {
      EXPECT_LE(std::fabs(deq[i] - x[i]), bound) << i;
      err2 += (deq[i] - x[i]) * (deq[i] - x[i]);
      x2 += x[i] * x[i];
    }
  }
  EXPECT_LT(std::sqrt(err2 / x2), 0.12);  // NF4's relative RMS error on normal weights
}

TEST(Nf4Test, NonFiniteWeightsAreRefusedNamingTheElement) {
  std::vector<float> x(100, 0.5f);
  x[42] = std::numeric_limits<float>::infinity();
  absl::StatusOr<Nf4Tensor> q = QuantizeNf4(x.data(), 100);
  ASSERT_FALSE(q.ok());
  EXPECT_EQ(q.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(q.status().message().find("element 42 is infinite"), std::string::npos) << q.status();
  x[42] = 0.5f;
  x[7] = std::nanf("");
  q = QuantizeNf4(x.data(), 100);
  ASSERT_FALSE(q.ok());
  EXPECT_NE(q.status().message().find("element 7 is NaN"), std::string::npos) << q.status();
}

TEST(Nf4Test, StorageIsAboutHalfAByteAWeight) {
  const int64_t n = int64_t{8192} * 8192;
  EXPECT_NEAR(static_cast<double>(Nf4StorageBytes(n)) / static_cast<double>(n), 0.516, 0.001);
}

}  // namespace
}  // namespace llamafleet::trainer
