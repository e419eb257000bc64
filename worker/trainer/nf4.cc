#include "nf4.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace llamafleet::trainer {
namespace {

// As published (QLoRA, appendix E; bitsandbytes' NF4 table).
constexpr double kLevels[16] = {-1.0,
                                -0.6961928009986877,
                                -0.5250730514526367,
                                -0.39491748809814453,
                                -0.28444138169288635,
                                -0.18477343022823334,
                                -0.09105003625154495,
                                0.0,
                                0.07958029955625534,
                                0.16093020141124725,
                                0.24611230194568634,
                                0.33791524171829224,
                                0.44070982933044434,
                                0.5626170039176941,
                                0.7229568362236023,
                                1.0};
constexpr uint8_t kZeroLevel = 7;

// The 15 halfway points between consecutive levels, rounded to float.
const std::array<float, 15>& Midpoints() {
  static const std::array<float, 15> m = [] {
    std::array<float, 15> out{};
    for (int i = 0; i < 15; ++i) out[i] = static_cast<float>((kLevels[i] + kLevels[i + 1]) / 2);
    return out;
  }();
  return m;
}

// The level nearest to y (y in [-1, 1], or NaN never: the caller checked).
uint8_t NearestLevel(float y) {
  const std::array<float, 15>& mid = Midpoints();
  // Levels below y's: the number of halfway points strictly below y.
  return static_cast<uint8_t>(std::lower_bound(mid.begin(), mid.end(), y) - mid.begin());
}

// The index of the DynamicMap8 value nearest to y; an exact tie takes the lower one.
uint8_t NearestMapCode(float y) {
  const std::array<float, 256>& map = DynamicMap8();
  const size_t j = std::lower_bound(map.begin(), map.end(), y) - map.begin();
  if (j == 0) return 0;
  if (j == map.size()) return 255;
  const float below = y - map[j - 1];
  const float above = map[j] - y;
  return static_cast<uint8_t>(above < below ? j : j - 1);
}

}  // namespace

const std::array<float, 16>& Nf4Levels() {
  static const std::array<float, 16> levels = [] {
    std::array<float, 16> out{};
    for (int i = 0; i < 16; ++i) out[i] = static_cast<float>(kLevels[i]);
    return out;
  }();
  return levels;
}

const std::array<float, 256>& DynamicMap8() {
  static const std::array<float, 256> map = [] {
    // signed, 7 exponent bits, 8 bits: for exponent i, 2^i fraction values (the means of
    // consecutive points of linspace(0.1, 1, 2^i + 1)) times 10^(i - 6), both signs; then
    // 0 and 1.
    std::vector<double> data;
    for (int i = 0; i < 7; ++i) {
      const int points = (1 << i) + 1;
      const double step = 0.9 / (points - 1);
      const double scale = std::pow(10.0, i - 6);
      for (int k = 0; k + 1 < points; ++k) {
        const double lo = 0.1 + k * step;
        const double hi = 0.1 + (k + 1) * step;
        const double mean = (lo + hi) / 2.0;
        data.push_back(scale * mean);
        data.push_back(-(scale * mean));
      }
    }
    data.push_back(0.0);
    data.push_back(1.0);
    std::array<float, 256> out{};
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(data[i]);
    std::sort(out.begin(), out.end());
    return out;
  }();
  return map;
}

absl::StatusOr<Nf4Tensor> QuantizeNf4(const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) {
      return absl::InvalidArgumentError(absl::StrCat("NF4 quantization: element ", i, " is ",
                                                     std::isnan(x[i]) ? "NaN" : "infinite",
                                                     " (a base weight must be finite)"));
    }
  }
  Nf4Tensor q;
  q.numel = n;
  q.codes.assign(static_cast<size_t>((n + 1) / 2), 0);
  const int64_t blocks = (n + kNf4Block - 1) / kNf4Block;
  std::vector<float> absmax(static_cast<size_t>(blocks), 0.0f);
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kNf4Block, end = std::min(n, begin + kNf4Block);
    float m = 0;
    for (int64_t i = begin; i < end; ++i) m = std::max(m, std::fabs(x[i]));
    absmax[b] = m;
    const float inv = m > 0 ? 1.0f / m : 0.0f;
    for (int64_t i = begin; i < end; ++i) {
      const uint8_t code = m > 0 ? NearestLevel(x[i] * inv) : kZeroLevel;
      q.codes[i / 2] |= (i % 2 == 0) ? static_cast<uint8_t>(code << 4) : code;
    }
  }
  // Double quantization of the absmaxes.
  double sum = 0;
  for (float a : absmax) sum += a;
  q.absmax_offset = blocks > 0 ? static_cast<float>(sum / static_cast<double>(blocks)) : 0.0f;
  const int64_t groups = (blocks + kNf4ScaleBlock - 1) / kNf4ScaleBlock;
  q.absmax_codes.assign(static_cast<size_t>(blocks), 0);
  q.absmax_scales.assign(static_cast<size_t>(groups), 0.0f);
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t begin = g * kNf4ScaleBlock, end = std::min(blocks, begin + kNf4ScaleBlock);
    float m = 0;
    for (int64_t b = begin; b < end; ++b) m = std::max(m, std::fabs(absmax[b] - q.absmax_offset));
    q.absmax_scales[g] = m;
    const float inv = m > 0 ? 1.0f / m : 0.0f;
    for (int64_t b = begin; b < end; ++b) {
      const float centred = absmax[b] - q.absmax_offset;
      q.absmax_codes[b] = NearestMapCode(m > 0 ? centred * inv : 0.0f);
    }
  }
  return q;
}

void DequantizeNf4(const Nf4Tensor& q, float* out) {
  const std::array<float, 16>& levels = Nf4Levels();
  const std::array<float, 256>& map = DynamicMap8();
  for (int64_t b = 0; b * kNf4Block < q.numel; ++b) {
    const float scaled = map[q.absmax_codes[b]] * q.absmax_scales[b / kNf4ScaleBlock];
    const float absmax = scaled + q.absmax_offset;
    const int64_t begin = b * kNf4Block, end = std::min(q.numel, begin + kNf4Block);
    for (int64_t i = begin; i < end; ++i) {
      const uint8_t byte = q.codes[i / 2];
      const uint8_t code = (i % 2 == 0) ? byte >> 4 : byte & 0x0F;
      out[i] = levels[code] * absmax;
    }
  }
}

int64_t Nf4StorageBytes(int64_t n) {
  const int64_t blocks = (n + kNf4Block - 1) / kNf4Block;
  const int64_t groups = (blocks + kNf4ScaleBlock - 1) / kNf4ScaleBlock;
  return (n + 1) / 2 + blocks + groups * static_cast<int64_t>(sizeof(float)) + sizeof(float);
}

}  // namespace llamafleet::trainer
