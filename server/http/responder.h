#ifndef LLAMAFLEET_SERVER_HTTP_RESPONDER_H_
#define LLAMAFLEET_SERVER_HTTP_RESPONDER_H_

// The seam between the HTTP transport (http_server.cc: sockets, TLS, limits) and the
// routes (gateway.cc: JSON <-> gRPC). A route answers one request through a Responder.

#include <functional>
#include <string>

#include <boost/beast/http.hpp>

namespace llamafleet::http {

using Request = boost::beast::http::request<boost::beast::http::string_body>;
using Response = boost::beast::http::response<boost::beast::http::string_body>;

// One request's way back to its client, implemented by the connection. Every method may
// be called from any thread (gRPC callbacks call it from gRPC's); the connection runs the
// work on its own strand.
class Responder {
 public:
  virtual ~Responder() = default;

  // Sends a complete response (Content-Length set here). Call once per request, and not
  // after SendEvent.
  virtual void Reply(Response response) = 0;

  // Server-sent events. The first call sends the response head (200, text/event-stream,
  // chunked); each call writes one event (`text` is the complete "event: ...\n\n" block).
  // `written(ok)` runs once the event is on the socket (ok = false: the client went away,
  // or the server is stopping); the next event should wait for it, which is how a slow
  // reader slows its own gRPC stream and nobody else's.
  virtual void SendEvent(std::string text, std::function<void(bool ok)> written) = 0;

  // Ends an event stream: the last chunk, then the connection closes.
  virtual void EndStream() = 0;

  // `closed` runs once if the connection closes before EndStream or Reply (the client
  // went away, a write timed out, the server is stopping). Replaces an earlier one.
  virtual void OnClose(std::function<void()> closed) = 0;
};

}  // namespace llamafleet::http

#endif  // LLAMAFLEET_SERVER_HTTP_RESPONDER_H_
