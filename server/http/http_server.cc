#include "server/http/http_server.h"

#include <openssl/ssl.h>

#include <array>
#include <atomic>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include "absl/strings/str_cat.h"
#include "server/auth_failures.h"
#include "server/http/connection_limits.h"
#include "server/http/gateway.h"
#include "server/http/json_errors.h"
#include "spdlog/spdlog.h"

namespace llamafleet::http {
namespace {

namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = boost::asio::ip::tcp;

std::chrono::steady_clock::duration Chrono(absl::Duration d) {
  return absl::ToChronoNanoseconds(d);
}

// On every response. The portal keeps an API token in sessionStorage, so script injection
// must be impossible: scripts only from this origin (the portal has no inline script),
// no framing, no sniffing, no referrer leaving the site. Styles may be inline (the portal
// sets sizes on elements).
template <typename Message>
void SetSecurityHeaders(Message& m) {
  m.set("Content-Security-Policy",
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; "
        "form-action 'self'");
  m.set(bhttp::field::x_frame_options, "DENY");
  m.set("X-Content-Type-Options", "nosniff");
  m.set("Referrer-Policy", "no-referrer");
}

class SessionBase {
 public:
  virtual ~SessionBase() = default;
  // Closes the connection (from any thread); an open event stream is abandoned.
  virtual void Close() = 0;
};

// What the listener and the sessions share; outlives both.
struct Registry {
  std::mutex mu;
  bool stopping = false;
  uint64_t next_id = 0;
  std::map<uint64_t, std::weak_ptr<SessionBase>> sessions;
  // Connections held, in all, per peer address and unauthenticated (set once by Start).
  std::optional<ConnectionLimits> limits;
};

// One HTTP/1.1 connection, plain (beast::tcp_stream) or TLS (beast::ssl_stream of one):
// the same code, the TLS handshake aside. Everything runs on the connection's strand
// (the stream's executor); the Responder methods post there.
//
// Requests are read one at a time: header first (431 beyond the header limit, 413 from
// Content-Length before any body byte is read), then, if the request has a body, the
// caller's token is checked (401 without reading the body), then the body; the next request is read
// once the response is written (keep-alive). An event stream owns the connection until it
// ends; a read left pending meanwhile notices the client leaving.
template <typename Stream>
class Session final : public SessionBase,
                      public Responder,
                      public std::enable_shared_from_this<Session<Stream>> {
 public:
  static constexpr bool kTls = !std::is_same_v<Stream, beast::tcp_stream>;

  Session(Stream stream, std::shared_ptr<net::io_context> ioc, std::shared_ptr<Gateway> gateway,
          const HttpServerOptions& options, std::shared_ptr<Registry> registry, uint64_t id,
          std::string peer)
      : ioc_(std::move(ioc)),
        stream_(std::move(stream)),
        gateway_(std::move(gateway)),
        options_(options),
        registry_(std::move(registry)),
        id_(id),
        peer_(std::move(peer)) {}

  ~Session() override {
    registry_->limits->Release(id_);
    std::lock_guard<std::mutex> lock(registry_->mu);
    registry_->sessions.erase(id_);
  }

  void Run() {
    net::dispatch(stream_.get_executor(), [self = this->shared_from_this()] {
      if constexpr (kTls) {
        self->Lowest().expires_after(Chrono(self->HeadTimeout()));
        self->stream_.async_handshake(ssl::stream_base::server,
                                      [self](beast::error_code ec) {
                                        if (ec) {
                                          spdlog::debug("http: TLS handshake failed: {}", ec.message());
                                          self->DoClose();
                                          return;
                                        }
                                        self->ReadHeader();
                                      });
      } else {
        self->ReadHeader();
      }
    });
  }

  void Close() override {
    net::post(stream_.get_executor(), [self = this->shared_from_this()] { self->DoClose(); });
  }

  // Responder.
  void Reply(Response response) override {
    net::post(stream_.get_executor(),
              [self = this->shared_from_this(), r = std::move(response)]() mutable {
                self->DoReply(std::move(r), /*linger=*/false);
              });
  }

  void SendEvent(std::string text, std::function<void(bool)> written) override {
    net::post(stream_.get_executor(), [self = this->shared_from_this(), t = std::move(text),
                                       w = std::move(written)]() mutable {
      if (self->closed_) {
        w(false);
        return;
      }
      self->queue_.push_back({std::move(t), std::move(w), false});
      self->StartStreamOrWrite();
    });
  }

  void EndStream() override {
    net::post(stream_.get_executor(), [self = this->shared_from_this()] {
      if (self->closed_) return;
      self->on_close_ = nullptr;  // ended normally: nothing to abandon
      self->queue_.push_back({"", nullptr, true});
      self->StartStreamOrWrite();
    });
  }

  void OnClose(std::function<void()> closed) override {
    net::post(stream_.get_executor(), [self = this->shared_from_this(), c = std::move(closed)]() mutable {
      if (self->closed_) {
        c();
        return;
      }
      self->on_close_ = std::move(c);
    });
  }

 private:
  struct Pending {
    std::string text;
    std::function<void(bool)> written;
    bool last = false;
  };

  beast::tcp_stream& Lowest() { return beast::get_lowest_layer(stream_); }

  // How long the client has to send a request's line and headers (or to finish the TLS
  // handshake): shorter until it has presented a good token.
  absl::Duration HeadTimeout() const {
    return authenticated_ ? options_.header_timeout
                          : std::min(options_.header_timeout, options_.unauthenticated_timeout);
  }

  // One of this connection's requests presented a good token: it leaves the pool of
  // unauthenticated connections (which may be closed to make room) for good.
  void MarkAuthenticated() {
    if (authenticated_) return;
    authenticated_ = true;
    registry_->limits->Authenticated(id_);
  }

  void ReadHeader() {
    if (closed_) return;
    parser_.emplace();
    parser_->header_limit(options_.max_header_bytes);
    parser_->body_limit(static_cast<uint64_t>(options_.max_body_bytes));
    // Waiting for a request: an unauthenticated connection may make room for a newcomer.
    registry_->limits->SetIdle(id_, true);
    Lowest().expires_after(Chrono(HeadTimeout()));
    bhttp::async_read_header(stream_, buffer_, *parser_,
                             [self = this->shared_from_this()](beast::error_code ec, size_t) {
                               self->OnHeader(ec);
                             });
  }

  void OnHeader(beast::error_code ec) {
    if (ec == bhttp::error::header_limit) {
      RejectAndClose(ErrorResponse(
          431, "REQUEST_HEADER_FIELDS_TOO_LARGE",
          absl::StrCat("the request line and headers exceed ", options_.max_header_bytes, " bytes")));
      return;
    }
    if (ec == bhttp::error::body_limit ||
        (!ec && parser_->content_length() &&
         *parser_->content_length() > static_cast<uint64_t>(options_.max_body_bytes))) {
      RejectAndClose(TooLarge());
      return;
    }
    if (ec) {
      if (ec.category() == bhttp::make_error_code(bhttp::error::bad_target).category() && ec != bhttp::error::end_of_stream &&
          ec != bhttp::error::partial_message) {
        RejectAndClose(ErrorResponse(400, "INVALID_ARGUMENT",
                                     absl::StrCat("malformed HTTP request: ", ec.message())));
        return;
      }
      DoClose();  // the client left, or timed out
      return;
    }
    registry_->limits->SetIdle(id_, false);
    // The client's address, for the services' count of failed token attempts, with the
    // proof that this server set it: set here on every request, replacing whatever the
    // client sent under those names.
    parser_->get().set(beast::string_view(kForwardedPeerKey), peer_);
    parser_->get().set(beast::string_view(kForwardedPeerProofKey), options_.forwarded_peer_proof);
    // A body is read only from a caller whose token is good and whose role may do what
    // the route does (nothing has been parsed of it yet): an unauthenticated client, or a
    // viewer posting a submission, cannot make the server hold or parse a body. The first
    // request of an unauthenticated connection to a route that needs credentials is
    // checked the same way, so a good token moves the connection out of the
    // unauthenticated pool; a refusal there is the answer the route would give.
    const bool has_body = !parser_->is_done();
    if (has_body || (!authenticated_ && gateway_->NeedsCredentials(parser_->get()))) {
      gateway_->Authenticate(parser_->get(), [self = this->shared_from_this(),
                                              has_body](std::optional<Response> refused) {
        net::post(self->stream_.get_executor(),
                  [self, has_body, refused = std::move(refused)]() mutable {
                    if (self->closed_) return;
                    if (!refused.has_value()) {
                      self->MarkAuthenticated();
                      self->ContinueToBody();
                    } else if (has_body) {
                      self->RejectAndClose(std::move(*refused));
                    } else {
                      self->keep_alive_ = self->parser_->get().keep_alive();
                      self->DoReply(std::move(*refused), /*linger=*/false);
                    }
                  });
      });
      return;
    }
    ContinueToBody();
  }

  void ContinueToBody() {
    // The body's own deadline, from the end of the header (and of its permission check).
    Lowest().expires_after(Chrono(options_.read_timeout));
    auto expect = parser_->get().find(bhttp::field::expect);
    if (expect != parser_->get().end() && beast::iequals(expect->value(), "100-continue")) {
      static const char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
      net::async_write(stream_, net::buffer(kContinue, sizeof(kContinue) - 1),
                       [self = this->shared_from_this()](beast::error_code ec, size_t) {
                         if (ec) {
                           self->DoClose();
                           return;
                         }
                         self->ReadBody();
                       });
      return;
    }
    ReadBody();
  }

  void ReadBody() {
    if (parser_->is_done()) {
      OnBody({});
      return;
    }
    bhttp::async_read(stream_, buffer_, *parser_,
                      [self = this->shared_from_this()](beast::error_code ec, size_t) {
                        self->OnBody(ec);
                      });
  }

  void OnBody(beast::error_code ec) {
    if (ec == bhttp::error::body_limit) {
      RejectAndClose(TooLarge());
      return;
    }
    if (ec) {
      DoClose();
      return;
    }
    Lowest().expires_never();
    Request request = parser_->release();
    keep_alive_ = request.keep_alive();
    gateway_->Handle(std::move(request), this->shared_from_this());
  }

  Response TooLarge() const {
    return ErrorResponse(413, "PAYLOAD_TOO_LARGE",
                         absl::StrCat("the request body exceeds ", options_.max_body_bytes, " bytes"));
  }

  // Answers a request that cannot be read further, then closes.
  void RejectAndClose(Response response) {
    keep_alive_ = false;
    DoReply(std::move(response), /*linger=*/true);
  }

  void DoReply(Response response, bool linger) {
    if (closed_ || streaming_) return;
    on_close_ = nullptr;
    bool stopping;
    {
      std::lock_guard<std::mutex> lock(registry_->mu);
      stopping = registry_->stopping;
    }
    const bool keep_alive = keep_alive_ && !stopping && !linger;
    response.version(11);
    response.set(bhttp::field::server, "llamafleet");
    SetSecurityHeaders(response);
    response.keep_alive(keep_alive);
    response.prepare_payload();
    response_ = std::make_unique<Response>(std::move(response));
    Lowest().expires_after(Chrono(options_.write_timeout));
    bhttp::async_write(stream_, *response_,
                       [self = this->shared_from_this(), keep_alive, linger](beast::error_code ec,
                                                                             size_t) {
                         self->response_.reset();
                         if (ec) {
                           self->DoClose();
                         } else if (linger) {
                           self->LingerClose();
                         } else if (!keep_alive) {
                           self->DoClose();
                         } else {
                           self->ReadHeader();
                         }
                       });
  }

  // After an early answer (413, 431) the client may still be sending: stop writing, read
  // and drop what comes for a moment, then close, so the client reads the answer instead
  // of a connection reset.
  void LingerClose() {
    beast::error_code ignored;
    Lowest().socket().shutdown(tcp::socket::shutdown_send, ignored);
    Lowest().expires_after(std::chrono::seconds(2));
    Drain();
  }

  void Drain() {
    Lowest().async_read_some(net::buffer(scratch_),
                             [self = this->shared_from_this()](beast::error_code ec, size_t) {
                               if (ec) {
                                 self->DoClose();
                                 return;
                               }
                               self->Drain();
                             });
  }

  // Event streams.
  void StartStreamOrWrite() {
    if (streaming_) {
      WriteNext();
      return;
    }
    streaming_ = true;
    // Notice the client leaving while the stream is quiet. Started before the write
    // timeout is set, so only writes time out.
    Lowest().expires_never();
    Watch();
    head_ = std::make_unique<bhttp::response<bhttp::empty_body>>(bhttp::status::ok, 11);
    head_->set(bhttp::field::server, "llamafleet");
    SetSecurityHeaders(*head_);
    head_->set(bhttp::field::content_type, "text/event-stream; charset=utf-8");
    head_->set(bhttp::field::cache_control, "no-cache");
    head_->set("X-Accel-Buffering", "no");
    head_->keep_alive(false);
    head_->chunked(true);
    serializer_ = std::make_unique<bhttp::response_serializer<bhttp::empty_body>>(*head_);
    writing_ = true;
    Lowest().expires_after(Chrono(options_.write_timeout));
    bhttp::async_write_header(stream_, *serializer_,
                              [self = this->shared_from_this()](beast::error_code ec, size_t) {
                                self->writing_ = false;
                                if (ec) {
                                  self->DoClose();
                                  return;
                                }
                                self->WriteNext();
                              });
  }

  void Watch() {
    stream_.async_read_some(net::buffer(scratch_),
                            [self = this->shared_from_this()](beast::error_code ec, size_t) {
                              if (ec) {
                                self->DoClose();
                                return;
                              }
                              self->Watch();  // a client does not send during a stream
                            });
  }

  void WriteNext() {
    if (writing_ || closed_ || queue_.empty()) return;
    writing_ = true;
    Lowest().expires_after(Chrono(options_.write_timeout));
    auto done = [self = this->shared_from_this()](beast::error_code ec, size_t) {
      self->writing_ = false;
      Pending item = std::move(self->queue_.front());
      self->queue_.pop_front();
      if (ec || item.last) {
        if (item.written) item.written(false);
        self->DoClose();
        return;
      }
      if (item.written) item.written(true);
      self->WriteNext();
    };
    if (queue_.front().last) {
      net::async_write(stream_, bhttp::make_chunk_last(), std::move(done));
    } else {
      net::async_write(stream_, bhttp::make_chunk(net::buffer(queue_.front().text)), std::move(done));
    }
  }

  void DoClose() {
    if (closed_) return;
    closed_ = true;
    if (auto closed = std::move(on_close_)) closed();
    on_close_ = nullptr;
    // Queued events are dropped (their writers hear `false`); one being written finishes
    // with an error once the socket is closed.
    for (size_t i = writing_ ? 1 : 0; i < queue_.size(); ++i) {
      if (queue_[i].written) queue_[i].written(false);
      queue_[i].written = nullptr;
    }
    beast::error_code ignored;
    Lowest().socket().shutdown(tcp::socket::shutdown_both, ignored);
    Lowest().close();
  }

  // Keeps the io_context alive as long as the socket (a gRPC callback may hold the last
  // reference to a session after the server stopped).
  const std::shared_ptr<net::io_context> ioc_;
  Stream stream_;
  const std::shared_ptr<Gateway> gateway_;
  const HttpServerOptions options_;  // a copy: a session can outlive the server
  const std::shared_ptr<Registry> registry_;
  const uint64_t id_;
  const std::string peer_;  // the client's address, as counted by registry_->limits

  // On the strand.
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  std::unique_ptr<Response> response_;
  bool keep_alive_ = false;
  bool authenticated_ = false;  // a request presented a good token
  bool closed_ = false;
  bool streaming_ = false;
  bool writing_ = false;
  std::deque<Pending> queue_;
  std::unique_ptr<bhttp::response<bhttp::empty_body>> head_;
  std::unique_ptr<bhttp::response_serializer<bhttp::empty_body>> serializer_;
  std::function<void()> on_close_;
  std::array<char, 512> scratch_;
};

}  // namespace

struct HttpServer::Impl {
  HttpServerOptions options;
  std::shared_ptr<net::io_context> ioc = std::make_shared<net::io_context>();
  std::optional<ssl::context> tls;
  std::optional<tcp::acceptor> acceptor;
  std::shared_ptr<Registry> registry = std::make_shared<Registry>();
  std::shared_ptr<Gateway> gateway;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  std::vector<std::thread> threads;
  // Set once Start has started the threads: before that, nothing runs that could stop.
  bool started = false;
  bool stopped = false;

  // Accept failures (out of descriptors, above all) back off from 10 ms doubling to 1 s,
  // logged once per streak, instead of retrying at once in a loop that burns a core.
  std::optional<net::steady_timer> accept_timer;  // on the acceptor's executor
  std::chrono::milliseconds accept_backoff{0};
  int64_t accept_failures = 0;

  void Accept() {
    acceptor->async_accept(net::make_strand(*ioc), [this](beast::error_code ec, tcp::socket socket) {
      if (ec == net::error::operation_aborted || !acceptor->is_open()) return;
      if (!ec) {
        if (accept_failures > 1) {
          spdlog::info("http: accepting again after {} failed accepts", accept_failures);
        }
        accept_failures = 0;
        accept_backoff = std::chrono::milliseconds(0);
        Serve(std::move(socket));
        Accept();
        return;
      }
      if (accept_failures++ == 0) spdlog::warn("http: accept failed: {}; backing off", ec.message());
      accept_backoff = std::min(std::chrono::milliseconds(1000),
                                std::max(std::chrono::milliseconds(10), accept_backoff * 2));
      if (!accept_timer.has_value()) accept_timer.emplace(acceptor->get_executor());
      accept_timer->expires_after(accept_backoff);
      accept_timer->async_wait([this](beast::error_code wait_ec) {
        if (wait_ec == net::error::operation_aborted || !acceptor->is_open()) return;
        Accept();
      });
    });
  }

  void Serve(tcp::socket socket) {
    uint64_t id;
    {
      std::lock_guard<std::mutex> lock(registry->mu);
      if (registry->stopping) return;
      id = registry->next_id++;
    }
    beast::error_code endpoint_ec;
    const tcp::endpoint remote = socket.remote_endpoint(endpoint_ec);
    std::string peer = endpoint_ec ? std::string() : remote.address().to_string();
    const ConnectionLimits::Admission admission = registry->limits->Admit(id, peer);
    if (admission.verdict != ConnectionLimits::Verdict::kAdmitted) {
      // Over a cap: a short answer (plain HTTP only), then close.
      auto s = std::make_shared<tcp::socket>(std::move(socket));
      if (tls) {
        beast::error_code ignored;
        s->close(ignored);
        return;
      }
      const std::string body =
          absl::StrCat(R"({"error":{"code":503,"status":"UNAVAILABLE","message":")",
                       admission.verdict == ConnectionLimits::Verdict::kTooManyFromPeer
                           ? "too many connections from this address"
                           : "too many connections",
                       R"(","field_violations":[]}})");
      auto busy = std::make_shared<std::string>(absl::StrCat(
          "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
          "Content-Length: ",
          body.size(), "\r\n\r\n", body));
      net::async_write(*s, net::buffer(*busy), [s, busy](beast::error_code, size_t) {
        beast::error_code ignored;
        s->shutdown(tcp::socket::shutdown_both, ignored);
        s->close(ignored);
      });
      return;
    }
    if (admission.evicted.has_value()) {
      // An idle connection without a token made room: closed (its count is gone already).
      std::shared_ptr<SessionBase> evicted;
      {
        std::lock_guard<std::mutex> lock(registry->mu);
        auto it = registry->sessions.find(*admission.evicted);
        if (it != registry->sessions.end()) evicted = it->second.lock();
      }
      if (evicted != nullptr) evicted->Close();
    }
    std::shared_ptr<SessionBase> session;
    if (tls) {
      auto s = std::make_shared<Session<beast::ssl_stream<beast::tcp_stream>>>(
          beast::ssl_stream<beast::tcp_stream>(std::move(socket), *tls), ioc, gateway, options,
          registry, id, peer);
      session = s;
      s->Run();
    } else {
      auto s = std::make_shared<Session<beast::tcp_stream>>(beast::tcp_stream(std::move(socket)),
                                                            ioc, gateway, options, registry, id, peer);
      session = s;
      s->Run();
    }
    std::lock_guard<std::mutex> lock(registry->mu);
    registry->sessions[id] = session;
  }
};

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options,
                                                              std::shared_ptr<grpc::Channel> channel) {
  std::unique_ptr<HttpServer> server(new HttpServer());
  server->impl_ = std::make_unique<Impl>();
  Impl& impl = *server->impl_;
  impl.options = options;
  impl.registry->limits.emplace(
      ConnectionLimitOptions{.max_total = options.max_connections,
                             .max_per_peer = options.max_connections_per_peer,
                             .max_unauthenticated = options.max_unauthenticated,
                             .max_unauthenticated_per_peer = options.max_unauthenticated_per_peer});

  if (!options.tls_cert_file.empty() || !options.tls_key_file.empty()) {
    if (options.tls_cert_file.empty() || options.tls_key_file.empty()) {
      return absl::InvalidArgumentError("TLS needs both a certificate and a key file");
    }
    impl.tls.emplace(ssl::context::tls_server);
    impl.tls->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                          ssl::context::no_sslv3 | ssl::context::no_tlsv1 |
                          ssl::context::no_tlsv1_1 | ssl::context::single_dh_use);
    beast::error_code ec;
    impl.tls->use_certificate_chain_file(options.tls_cert_file, ec);
    if (ec) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot load the TLS certificate chain from ", options.tls_cert_file, ": ", ec.message()));
    }
    impl.tls->use_private_key_file(options.tls_key_file, ssl::context::pem, ec);
    if (ec) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot load the TLS private key from ", options.tls_key_file, ": ", ec.message()));
    }
    if (SSL_CTX_check_private_key(impl.tls->native_handle()) != 1) {
      return absl::InvalidArgumentError(absl::StrCat("TLS key ", options.tls_key_file,
                                                     " does not match the certificate ",
                                                     options.tls_cert_file));
    }
    server->tls_ = true;
  }

  const size_t colon = options.listen.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("HTTP listen address ", options.listen, " is not HOST:PORT"));
  }
  std::string host = options.listen.substr(0, colon);
  const std::string port = options.listen.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  beast::error_code ec;
  tcp::resolver resolver(*impl.ioc);
  auto endpoints = resolver.resolve(host.empty() ? "0.0.0.0" : host, port,
                                    tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || endpoints.empty()) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.listen, ": ",
                                               ec ? ec.message() : "no address"));
  }
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  impl.acceptor.emplace(net::make_strand(*impl.ioc));
  impl.acceptor->open(endpoint.protocol(), ec);
  if (!ec) impl.acceptor->set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) impl.acceptor->bind(endpoint, ec);
  if (!ec) impl.acceptor->listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.listen, ": ", ec.message()));
  }
  server->address_ = absl::StrCat(options.listen.substr(0, colon), ":",
                                  impl.acceptor->local_endpoint().port());

  GatewayOptions gateway;
  gateway.max_event_streams = options.max_event_streams;
  gateway.call_timeout = options.call_timeout;
  gateway.metrics = options.metrics;
  gateway.path_roots = options.path_roots;
  gateway.checkpoint_root = options.checkpoint_root;
  impl.gateway = std::make_shared<Gateway>(std::move(channel), std::move(gateway));

  impl.work.emplace(impl.ioc->get_executor());
  net::post(impl.acceptor->get_executor(), [&impl] { impl.Accept(); });
  for (int i = 0; i < std::max(1, options.threads); ++i) {
    impl.threads.emplace_back([ioc = impl.ioc] { ioc->run(); });
  }
  impl.started = true;
  return server;
}

void HttpServer::Shutdown(absl::Duration grace) {
  // A server whose Start failed runs no thread that would complete the steps below.
  if (impl_ == nullptr || !impl_->started || impl_->stopped) return;
  Impl& impl = *impl_;
  impl.stopped = true;
  std::vector<std::shared_ptr<SessionBase>> sessions;
  {
    std::lock_guard<std::mutex> lock(impl.registry->mu);
    impl.registry->stopping = true;
    for (auto& [id, weak] : impl.registry->sessions) {
      if (auto s = weak.lock()) sessions.push_back(std::move(s));
    }
  }
  std::promise<void> closed;
  net::post(impl.acceptor->get_executor(), [&impl, &closed] {
    beast::error_code ignored;
    impl.acceptor->close(ignored);
    if (impl.accept_timer.has_value()) impl.accept_timer->cancel();
    closed.set_value();
  });
  closed.get_future().wait();
  // Ends event streams (their gRPC calls are cancelled) and idle keep-alive connections.
  for (auto& s : sessions) s->Close();
  sessions.clear();
  impl.gateway->CancelAll();
  impl.work.reset();
  // Cancelled calls and closed sockets finish quickly; then run() runs out of work.
  const absl::Time deadline = absl::Now() + grace;
  while ((impl.gateway->calls_in_flight() > 0 || impl.registry->limits->total() > 0) &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  if (impl.gateway->calls_in_flight() > 0 || impl.registry->limits->total() > 0) {
    spdlog::warn("http: {} calls and {} connections still open after {}; stopping anyway",
                 impl.gateway->calls_in_flight(), impl.registry->limits->total(),
                 absl::FormatDuration(grace));
  }
  impl.ioc->stop();
  for (std::thread& t : impl.threads) t.join();
  impl.threads.clear();
}

HttpServer::~HttpServer() { Shutdown(); }

}  // namespace llamafleet::http
