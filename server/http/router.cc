#include "server/http/router.h"

#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace llamafleet::http {

bool MatchPattern(absl::string_view pattern, absl::string_view path, PathParams* params) {
  const std::vector<absl::string_view> want = absl::StrSplit(pattern, '/');
  const std::vector<absl::string_view> got = absl::StrSplit(path, '/');
  for (size_t i = 0; i < want.size(); ++i) {
    absl::string_view w = want[i];
    const bool param = absl::StartsWith(w, "{");
    if (param && absl::EndsWith(w, "...}") && i + 1 == want.size()) {
      if (got.size() < want.size()) return false;
      std::vector<absl::string_view> rest(got.begin() + i, got.end());
      (*params)[std::string(w.substr(1, w.size() - 5))] = absl::StrJoin(rest, "/");
      return true;
    }
    if (i >= got.size()) return false;
    absl::string_view g = got[i];
    if (!param) {
      if (w != g) return false;
      continue;
    }
    const size_t close = w.find('}');
    const absl::string_view name = w.substr(1, close - 1);
    const absl::string_view suffix = w.substr(close + 1);
    if (!absl::ConsumeSuffix(&g, suffix) || g.empty()) return false;
    (*params)[std::string(name)] = std::string(g);
  }
  return want.size() == got.size();
}

}  // namespace llamafleet::http
