#include "server/http/portal_assets.h"

#include <algorithm>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "server/http/json_errors.h"

namespace llamafleet::portal {

const Asset* FindAsset(std::string_view path) {
  const std::vector<Asset>& assets = Assets();
  auto it = std::lower_bound(assets.begin(), assets.end(), path,
                             [](const Asset& a, std::string_view p) { return a.path < p; });
  return it != assets.end() && it->path == path ? &*it : nullptr;
}

http::Response Serve(const http::Request& request, std::string_view std_path) {
  namespace bhttp = boost::beast::http;
  constexpr absl::string_view kStaticPrefix = "/ui/static/";
  const absl::string_view path(std_path.data(), std_path.size());
  if (path == "/" || path == "/ui") {
    http::Response response(bhttp::status::found, 11);
    response.set(bhttp::field::location, "/ui/");
    return response;
  }
  const Asset* asset = absl::StartsWith(path, kStaticPrefix)
                           ? FindAsset(std_path.substr(kStaticPrefix.size()))
                           : FindAsset("index.html");
  if (asset == nullptr) {
    return http::ErrorResponse(404, "NOT_FOUND", absl::StrCat("no portal file ", path));
  }
  const std::string etag(asset->etag);
  auto match = request.find(bhttp::field::if_none_match);
  bool not_modified = false;
  if (match != request.end()) {
    for (absl::string_view tag :
         absl::StrSplit(absl::string_view(match->value().data(), match->value().size()), ',')) {
      tag = absl::StripAsciiWhitespace(tag);
      absl::ConsumePrefix(&tag, "W/");
      not_modified = not_modified || tag == etag || tag == "*";
    }
  }
  http::Response response(not_modified ? bhttp::status::not_modified : bhttp::status::ok, 11);
  response.set(bhttp::field::etag, etag);
  // File names are not content-hashed: caches keep them but revalidate (a 304 is cheap).
  response.set(bhttp::field::cache_control, "no-cache");
  if (!not_modified) {
    response.set(bhttp::field::content_type,
                 std::string(asset->content_type.data(), asset->content_type.size()));
    response.body().assign(asset->data.data(), asset->data.size());
  }
  return response;
}

}  // namespace llamafleet::portal
