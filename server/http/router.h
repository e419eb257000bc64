#ifndef LLAMAFLEET_SERVER_HTTP_ROUTER_H_
#define LLAMAFLEET_SERVER_HTTP_ROUTER_H_

// The route table's matching. A route is {method, path pattern, permission, query
// parameters, handler}; the table itself is Gateway::Routes() (gateway.cc).
//
// Patterns are '/'-separated segments: a literal ("jobs:batch"), "{name}" (one non-empty
// segment, bound to `name`), "{name}:verb" (a segment ending in ":verb", the part before
// it bound), or "{name...}" as the last segment (the rest of the path, '/'s and all,
// possibly empty). The first pattern in table order that matches the path names the
// resource; among the routes with that pattern, the request's method picks the route
// (none: 405 with the pattern's methods in Allow).

#include <map>
#include <string>
#include <vector>

#include <boost/beast/http/verb.hpp>

#include "absl/strings/string_view.h"

namespace llamafleet::http {

// What the caller's role must allow (permissions.h) for the route to be served. The
// gateway checks it before a request body is read; the gRPC services check it again.
enum class Permission { kPublic, kRead, kSubmit, kCancel };

using PathParams = std::map<std::string, std::string, std::less<>>;

// True if `path` matches `pattern`; binds the pattern's parameters into `params`.
bool MatchPattern(absl::string_view pattern, absl::string_view path, PathParams* params);

template <typename Handler>
struct Route {
  boost::beast::http::verb method;
  absl::string_view pattern;
  Permission permission;
  // The query parameters the route takes; any other is refused (400).
  std::vector<std::string> query;
  Handler handler;
};

template <typename Handler>
struct RouteMatch {
  const Route<Handler>* route = nullptr;  // null: see `allowed`
  PathParams params;
  // When `route` is null: the methods the path takes (405), or empty (404).
  std::vector<std::string> allowed;
};

template <typename Handler>
RouteMatch<Handler> FindRoute(const std::vector<Route<Handler>>& table,
                              boost::beast::http::verb method, absl::string_view path) {
  RouteMatch<Handler> match;
  absl::string_view resource;
  for (const Route<Handler>& route : table) {
    if (resource.empty()) {
      PathParams params;
      if (!MatchPattern(route.pattern, path, &params)) continue;
      resource = route.pattern;
      match.params = std::move(params);
    } else if (route.pattern != resource) {
      continue;
    }
    if (route.method == method) {
      match.route = &route;
      match.allowed.clear();
      return match;
    }
    const auto name = boost::beast::http::to_string(route.method);
    match.allowed.emplace_back(name.data(), name.size());
  }
  return match;
}

}  // namespace llamafleet::http

#endif  // LLAMAFLEET_SERVER_HTTP_ROUTER_H_
