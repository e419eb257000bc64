#ifndef LLAMAFLEET_SERVER_HTTP_PORTAL_ASSETS_H_
#define LLAMAFLEET_SERVER_HTTP_PORTAL_ASSETS_H_

// The web portal's files, embedded into the coordinator at build time from
// server/portal/static/ by cmake/EmbedAssets.cmake, so the binary serves them with no
// files to install next to it.

#include <string_view>
#include <vector>

#include "server/http/responder.h"

namespace llamafleet::portal {

struct Asset {
  // Relative to server/portal/static/, '/'-separated ("index.html", "js/app.js").
  std::string_view path;
  std::string_view content_type;
  // Strong validator, quoted as it goes on the wire ("\"3f2a...\"").
  std::string_view etag;
  std::string_view data;
};

// Every embedded file, sorted by path. Generated.
const std::vector<Asset>& Assets();

// The asset at `path`, or nullptr.
const Asset* FindAsset(std::string_view path);

// GET of a portal path: "/" and "/ui" redirect to "/ui/"; "/ui/static/FILE" is that asset
// (404 if none); any other "/ui/..." path is a page of the single-page app (index.html).
// With ETag and If-None-Match (304).
http::Response Serve(const http::Request& request, std::string_view path);

}  // namespace llamafleet::portal

#endif  // LLAMAFLEET_SERVER_HTTP_PORTAL_ASSETS_H_
