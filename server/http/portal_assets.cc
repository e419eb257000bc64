#include "server/http/portal_assets.h"

#include <algorithm>

namespace llamafleet::portal {

const Asset* FindAsset(std::string_view path) {
  const std::vector<Asset>& assets = Assets();
  auto it = std::lower_bound(assets.begin(), assets.end(), path,
                             [](const Asset& a, std::string_view p) { return a.path < p; });
  return it != assets.end() && it->path == path ? &*it : nullptr;
}

}  // namespace llamafleet::portal
