#include "clients/cli/sample_output.h"

#include <map>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "clients/cli/escape.h"
#include "common/utf8.h"

namespace llamafleet::cli {
namespace {

// "#2 eos, 3 tokens, contains 1, exact_match 0" (scores by name).
std::string SampleHeader(const v1::Sample& s) {
  std::string out =
      absl::StrCat("#", s.index(), " ", s.stop_reason().empty() ? "-" : s.stop_reason(), ", ",
                   s.tokens(), s.tokens() == 1 ? " token" : " tokens");
  const std::map<std::string, double> scores(s.scores().begin(), s.scores().end());
  for (const auto& [name, value] : scores)
    absl::StrAppend(&out, ", ", name, " ", absl::StrFormat("%.4g", value));
  return EscapeTableCell(out);
}

// `text` on one line, at most `width` bytes (cut on a character edge, "..." when cut).
std::string OneLineCut(std::string_view text, size_t width) {
  std::string line = EscapeTableCell(text);
  if (line.size() <= width || width < 4) return line;
  return absl::StrCat(line.substr(0, Utf8PrefixLength(line, width - 3)), "...");
}

}  // namespace

std::string SamplesSummary(const std::vector<v1::Sample>& samples, size_t width) {
  if (samples.empty()) return "";
  std::string out = absl::StrCat("Samples at step ", samples.front().step(), ":\n");
  for (const v1::Sample& s : samples) {
    absl::StrAppend(&out, "  ", SampleHeader(s), "\n");
    absl::StrAppend(&out, "    prompt: ", OneLineCut(s.prompt(), width), "\n");
    absl::StrAppend(&out, "    text:   ", OneLineCut(s.text(), width), "\n");
    if (!s.reference().empty())
      absl::StrAppend(&out, "    ref:    ", OneLineCut(s.reference(), width), "\n");
  }
  return out;
}

std::string SamplesText(const v1::ListSamplesResponse& response) {
  if (response.samples().empty()) {
    return response.steps().empty() ? "no samples\n" : "no samples at that step\n";
  }
  std::string out;
  int64_t step = -1;
  for (const v1::Sample& s : response.samples()) {
    if (s.step() != step) {
      step = s.step();
      absl::StrAppend(&out, out.empty() ? "" : "\n", "== step ", step, " (attempt ", s.attempt(),
                      ") ==\n");
    }
    absl::StrAppend(&out, SampleHeader(s), "\n");
    absl::StrAppend(&out, "--- prompt\n", EscapeControls(s.prompt()), "\n");
    absl::StrAppend(&out, "--- text\n", EscapeControls(s.text()), "\n");
    if (!s.reference().empty())
      absl::StrAppend(&out, "--- reference\n", EscapeControls(s.reference()), "\n");
  }
  absl::StrAppend(&out, "\nsteps with samples: ", absl::StrJoin(response.steps(), " "), "\n");
  return out;
}

std::string DpoRewardsLine(const v1::DpoRewards& dpo) {
  return absl::StrFormat("chosen %.4g, rejected %.4g, accuracy %.0f%%, margin %.4g", dpo.chosen(),
                         dpo.rejected(), dpo.accuracy() * 100, dpo.margin());
}

}  // namespace llamafleet::cli
