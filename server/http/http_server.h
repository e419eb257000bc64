#ifndef LLAMAFLEET_SERVER_HTTP_HTTP_SERVER_H_
#define LLAMAFLEET_SERVER_HTTP_HTTP_SERVER_H_

// The coordinator's HTTP/JSON API, web portal and /metrics (Boost.Beast), a gateway in
// front of the gRPC services: every /api/v1 route is one call through the server's
// in-process channel, so authentication, validation and behaviour live in one place.
// Routes and the JSON mapping are in gateway.h; this file is the transport.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace grpc {
class Channel;
}

namespace llamafleet::http {

struct HttpServerOptions {
  // HOST:PORT; port 0 picks a free port (see HttpServer::address()).
  std::string listen = "127.0.0.1:0";
  // PEM certificate chain and private key: when both are set the server speaks HTTPS only.
  std::string tls_cert_file;
  std::string tls_key_file;
  // Largest request body (413 beyond it, sent before the body is read).
  int64_t max_body_bytes = 4 << 20;
  // Largest request line + header block (431 beyond it).
  uint32_t max_header_bytes = 16 << 10;
  // Time allowed to receive a request's line and headers (and for an idle keep-alive
  // connection to start its next request); then to receive its body; and to write one
  // response or event to a client that is not reading. A client sending a request a byte
  // at a time (slowloris) holds its connection for at most the first two.
  absl::Duration header_timeout = absl::Seconds(10);
  absl::Duration read_timeout = absl::Seconds(30);
  absl::Duration write_timeout = absl::Seconds(30);
  // A connection none of whose requests has yet presented a good token (only /healthz,
  // the portal's files, or refusals) has this long to send each request's line and
  // headers, the TLS handshake included; at most header_timeout.
  absl::Duration unauthenticated_timeout = absl::Seconds(5);
  // Connections beyond this, in all or from one peer address (0: no per-peer cap), are
  // answered 503 and closed: one client cannot hold every connection. Of them, at most
  // max_unauthenticated (from one address: max_unauthenticated_per_peer) are
  // unauthenticated ones; a new connection to a full pool of those takes the place of an
  // idle one from the address holding the most (server/http/connection_limits.h), so a
  // few addresses cannot lock out /healthz or clients with a token.
  int max_connections = 512;
  int max_connections_per_peer = 64;
  int max_unauthenticated = 128;
  int max_unauthenticated_per_peer = 32;
  // Concurrent event streams (?follow=true) beyond this are answered 503.
  int max_event_streams = 256;
  // Threads running the io_context (the handlers never block: gRPC calls are async).
  int threads = 2;
  // Deadline of each gRPC call a unary route makes.
  absl::Duration call_timeout = absl::Seconds(30);
  // The Prometheus text served at /metrics (after a WhoAmI check of the caller's token).
  std::function<std::string()> metrics;
  // The coordinator's path roots and default checkpoint root (GatewayOptions).
  std::vector<std::string> path_roots;
  std::string checkpoint_root;
  // Sent with each request's client address to the services (server/auth_failures.h),
  // which count failed tokens by that address only with this proof. Empty: by the
  // gateway's own (one count for every HTTP client).
  std::string forwarded_peer_proof;
};

class HttpServer {
 public:
  // Binds, loads the TLS files if set, and starts serving. `channel` reaches the
  // coordinator's gRPC services (Server::InProcessChannel). Errors: the address cannot be
  // bound (UNAVAILABLE), a TLS file cannot be loaded (INVALID_ARGUMENT naming the file).
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options,
                                                           std::shared_ptr<grpc::Channel> channel);
  // Shutdown(), if not done yet.
  ~HttpServer();

  // "HOST:PORT" actually bound.
  const std::string& address() const { return address_; }
  bool tls() const { return tls_; }

  // Stops accepting, ends every event stream (cancelling its gRPC call) and closes every
  // connection, waits (at most `grace`) for the gRPC calls in flight, stops the threads.
  // Call before shutting the gRPC server down. Idempotent.
  void Shutdown(absl::Duration grace = absl::Seconds(5));

  struct Impl;

 private:
  HttpServer() = default;

  std::string address_;
  bool tls_ = false;
  std::unique_ptr<Impl> impl_;
};

}  // namespace llamafleet::http

#endif  // LLAMAFLEET_SERVER_HTTP_HTTP_SERVER_H_
