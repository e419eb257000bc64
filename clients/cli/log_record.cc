#include "clients/cli/log_record.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "clients/cli/output.h"
#include "nlohmann/json.hpp"

namespace llamafleet::cli {
namespace {

using nlohmann::json;

// The fields of one record, each rendered only when present with the right type.
class Fields {
 public:
  explicit Fields(const json& r) : r_(r) {}

  bool Has(const char* key) const { return r_.contains(key) && r_[key].is_number(); }
  double Num(const char* key) const { return Has(key) ? r_[key].get<double>() : 0.0; }
  std::string Str(const char* key) const {
    return r_.contains(key) && r_[key].is_string() ? r_[key].get<std::string>() : "";
  }
  // "loss 2.3100"; "" when absent.
  std::string Loss(const char* key, const char* label) const {
    return Has(key) ? absl::StrFormat("%s %.4f", label, Num(key)) : "";
  }
  std::string Count(const char* key, absl::string_view label) const {
    return Has(key) ? absl::StrCat(label, FormatCount(std::llround(Num(key)))) : "";
  }

 private:
  const json& r_;
};

// The non-empty parts joined by " · ".
std::string Parts(std::vector<std::string> parts) {
  std::vector<std::string> kept;
  for (std::string& p : parts) {
    if (!p.empty()) kept.push_back(std::move(p));
  }
  return absl::StrCat("» ", absl::StrJoin(kept, " · "));
}

std::string Metrics(const Fields& f) {
  return Parts(
      {f.Count("step", "step "), f.Loss("loss", "loss"),
       f.Has("lr") ? absl::StrFormat("lr %.3g", f.Num("lr")) : "",
       f.Num("grad_norm") != 0 ? absl::StrFormat("grad norm %.3g", f.Num("grad_norm")) : "",
       f.Has("tokens_per_s")
           ? absl::StrCat(FormatCount(std::llround(f.Num("tokens_per_s"))), " tok/s")
           : "",
       f.Has("mfu") ? absl::StrFormat("MFU %.1f%%", f.Num("mfu") * 100) : "",
       f.Num("peak_mem_bytes") > 0
           ? absl::StrCat("peak ", FormatBytes(static_cast<int64_t>(f.Num("peak_mem_bytes"))))
           : ""});
}

std::string Event(const std::string& event, const json& r, const Fields& f) {
  if (event == "started") {
    return Parts({"started", f.Count("world_size", "world "), f.Count("parameters", "parameters "),
                  f.Count("total_steps", "steps "), f.Count("global_batch", "batch ")});
  }
  if (event == "resumed") return Parts({f.Count("step", "resumed from step "), f.Str("path")});
  if (event == "checkpoint_saved") {
    return Parts({f.Count("step", "checkpoint at step "),
                  f.Has("bytes") ? FormatBytes(static_cast<int64_t>(f.Num("bytes"))) : "",
                  f.Loss("loss", "loss"), f.Str("path")});
  }
  if (event == "phase") {
    return Parts({absl::StrCat(absl::StrReplaceAll(f.Str("phase"), {{"_", " "}}),
                               absl::StrFormat(" %.2f s", f.Num("seconds"))),
                  f.Str("detail")});
  }
  if (event == "tokenizing") {
    const double total = f.Num("total_bytes"), done = f.Num("done_bytes");
    return Parts({absl::StrCat("tokenizing ", f.Str("path")),
                  total > 0 ? absl::StrFormat("%.0f%%", std::floor(100 * done / total))
                            : FormatBytes(static_cast<int64_t>(done))});
  }
  if (event == "preempted")
    return Parts({f.Count("step", "preempted at step "), f.Loss("loss", "loss")});
  if (event == "stopped_early") return Parts({f.Str("reason")});
  if (event == "finished") {
    return Parts({f.Count("steps", "finished after ") + (f.Has("steps") ? " steps" : ""),
                  f.Loss("loss", "loss"),
                  f.Str("export_dir").empty() ? "" : "exported to " + f.Str("export_dir")});
  }
  if (event == "exit") return Parts({absl::StrCat("exit ", f.Str("code")), f.Str("message")});
  // Another event: its name and the rest of the record as it is.
  json rest = r;
  rest.erase("type");
  rest.erase("event");
  return Parts(
      {event, rest.empty() ? "" : rest.dump(-1, ' ', false, json::error_handler_t::replace)});
}

// The line as a JSON object; a discarded value for anything else.
json ParseRecord(absl::string_view line) {
  if (line.empty() || line.front() != '{') return json(json::value_t::discarded);
  json r = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (!r.is_object()) return json(json::value_t::discarded);
  return r;
}

}  // namespace

std::optional<std::string> LogTextLine(absl::string_view line) {
  const json r = ParseRecord(line);
  if (!r.is_discarded()) {
    const Fields f(r);
    const std::string type = f.Str("type");
    if (type == "metrics" || (type == "event" && f.Str("event") == "stopped_early"))
      return std::nullopt;
  }
  std::optional<std::string> text = DescribeLogRecord(line);
  return text.has_value() ? std::move(*text) : std::string(line);
}

std::optional<std::string> DescribeLogRecord(absl::string_view line) {
  const json r = ParseRecord(line);
  if (r.is_discarded()) return std::nullopt;
  const Fields f(r);
  const std::string type = f.Str("type");
  if (type == "metrics") return Metrics(f);
  if (type == "eval") {
    return Parts(
        {f.Count("step", "eval after step "), f.Loss("loss", "loss"),
         f.Has("perplexity") ? absl::StrFormat("perplexity %.4g", f.Num("perplexity")) : "",
         f.Has("tokens") ? absl::StrCat(FormatCount(std::llround(f.Num("tokens"))), " tokens")
                         : ""});
  }
  if (type != "event" || f.Str("event").empty()) return std::nullopt;
  return Event(f.Str("event"), r, f);
}

}  // namespace llamafleet::cli
