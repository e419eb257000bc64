// Where the fields of a parsed document are written.

#include "jobspec/jobspec.h"

namespace llamafleet {

void FieldPositions::Set(std::string path, SourcePosition position) {
  if (position.line <= 0) return;
  positions_.insert_or_assign(std::move(path), position);
}

SourcePosition FieldPositions::Find(absl::string_view path) const {
  while (!path.empty()) {
    if (auto it = positions_.find(path); it != positions_.end()) return it->second;
    // The parent: "a.b[2]" -> "a.b" -> "a".
    const size_t cut = path.find_last_of(".[");
    if (cut == absl::string_view::npos) break;
    path = path.substr(0, cut);
  }
  return {};
}

}  // namespace llamafleet
