#include "server/http/gateway.h"

#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <mutex>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "jobspec/jobspec.h"
#include "nlohmann/json.hpp"
#include "server/http/portal_assets.h"

namespace llamafleet::http {

namespace bhttp = boost::beast::http;

Response ErrorResponse(int http_status, absl::string_view status, absl::string_view message,
                       absl::string_view violations_json) {
  auto quote = [](absl::string_view s) {
    return nlohmann::json(std::string(s)).dump(-1, ' ', false,
                                               nlohmann::json::error_handler_t::replace);
  };
  Response response(static_cast<bhttp::status>(http_status), 11);
  response.set(bhttp::field::content_type, "application/json");
  response.body() = absl::StrCat("{\"error\":{\"code\":", http_status, ",\"status\":", quote(status),
                                 ",\"message\":", quote(message),
                                 ",\"field_violations\":", violations_json, "}}\n");
  return response;
}

namespace {

constexpr absl::string_view kApiPrefix = "/api/v1/";
constexpr absl::string_view kStaticPrefix = "/ui/static/";

// ---------------------------------------------------------------------------
// JSON and errors
// ---------------------------------------------------------------------------

std::string ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string out;
  if (!google::protobuf::util::MessageToJsonString(message, &out, options).ok()) return "{}";
  return out;
}

// Strict: an unknown or misspelled field is an error that names it.
absl::Status FromJson(absl::string_view body, google::protobuf::Message* message) {
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  auto status = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(body.data(), body.size()), message, options);
  if (status.ok()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "invalid JSON body for ", message->GetDescriptor()->name(), ": ",
      absl::string_view(status.message().data(), status.message().size())));
}

Response JsonResponse(const google::protobuf::Message& message,
                      bhttp::status status = bhttp::status::ok) {
  Response response(status, 11);
  response.set(bhttp::field::content_type, "application/json");
  response.body() = ToJson(message);
  response.body().push_back('\n');
  return response;
}

int HttpStatusFor(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK: return 200;
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::OUT_OF_RANGE: return 400;
    case grpc::StatusCode::UNAUTHENTICATED: return 401;
    case grpc::StatusCode::PERMISSION_DENIED: return 403;
    case grpc::StatusCode::NOT_FOUND: return 404;
    case grpc::StatusCode::ALREADY_EXISTS:
    case grpc::StatusCode::ABORTED: return 409;
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return 429;
    case grpc::StatusCode::CANCELLED: return 499;
    case grpc::StatusCode::UNIMPLEMENTED: return 501;
    case grpc::StatusCode::UNAVAILABLE: return 503;
    case grpc::StatusCode::DEADLINE_EXCEEDED: return 504;
    default: return 500;
  }
}

std::string StatusName(grpc::StatusCode code) {
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

// The services attach llamafleet.v1.ErrorDetails to INVALID_ARGUMENT statuses.
std::string ViolationsJson(const grpc::Status& status) {
  if (status.error_details().empty()) return "[]";
  v1::ErrorDetails details;
  if (!details.ParseFromString(status.error_details())) return "[]";
  std::vector<std::string> items;
  for (const v1::FieldViolation& v : details.field_violations()) items.push_back(ToJson(v));
  return absl::StrCat("[", absl::StrJoin(items, ","), "]");
}

Response GrpcError(const grpc::Status& status) {
  return ErrorResponse(HttpStatusFor(status.error_code()), StatusName(status.error_code()),
                       status.error_message(), ViolationsJson(status));
}

Response AbslError(const absl::Status& status) {
  return GrpcError(grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                                std::string(status.message())));
}

Response BadRequest(absl::string_view message) {
  return ErrorResponse(400, "INVALID_ARGUMENT", message);
}

Response NotFound(absl::string_view path) {
  return ErrorResponse(404, "NOT_FOUND", absl::StrCat("no route for ", path));
}

// One "event: ...\ndata: ...\n\n" block; `json` is a single line.
std::string SseEvent(absl::string_view event, absl::string_view json, int64_t id = 0) {
  return absl::StrCat(id > 0 ? absl::StrCat("id: ", id, "\n") : "", "event: ", event,
                      "\ndata: ", json, "\n\n");
}

std::string SseError(const grpc::Status& status) {
  Response r = GrpcError(status);
  std::string body = r.body();
  while (!body.empty() && body.back() == '\n') body.pop_back();
  return SseEvent("error", body);
}

// ---------------------------------------------------------------------------
// Request parsing
// ---------------------------------------------------------------------------

absl::StatusOr<std::string> PercentDecode(absl::string_view in, bool plus_is_space) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '%') {
      int value;
      if (i + 2 >= in.size()) return absl::InvalidArgumentError("bad percent-encoding in the URL");
      const std::string hex(in.substr(i + 1, 2));
      if (!absl::ascii_isxdigit(hex[0]) || !absl::ascii_isxdigit(hex[1]) ||
          !absl::SimpleHexAtoi(hex, &value)) {
        return absl::InvalidArgumentError("bad percent-encoding in the URL");
      }
      out.push_back(static_cast<char>(value));
      i += 2;
    } else if (in[i] == '+' && plus_is_space) {
      out.push_back(' ');
    } else {
      out.push_back(in[i]);
    }
  }
  return out;
}

// The query string of one request; every route says which parameters it takes, and an
// unknown one is an error (a typo must not silently widen a filter).
class Query {
 public:
  static absl::StatusOr<Query> Parse(absl::string_view query) {
    Query q;
    for (absl::string_view part : absl::StrSplit(query, '&', absl::SkipEmpty())) {
      const size_t eq = part.find('=');
      absl::StatusOr<std::string> key = PercentDecode(part.substr(0, eq), true);
      if (!key.ok()) return key.status();
      absl::StatusOr<std::string> value =
          PercentDecode(eq == absl::string_view::npos ? "" : part.substr(eq + 1), true);
      if (!value.ok()) return value.status();
      q.params_.emplace_back(std::move(*key), std::move(*value));
    }
    return q;
  }

  absl::Status Only(std::initializer_list<absl::string_view> allowed) const {
    for (const auto& [key, value] : params_) {
      bool ok = false;
      for (absl::string_view a : allowed) ok = ok || key == a;
      if (!ok) {
        return absl::InvalidArgumentError(
            allowed.size() == 0
                ? absl::StrCat("unknown query parameter \"", key, "\": this route takes none")
                : absl::StrCat("unknown query parameter \"", key,
                               "\": this route takes ", absl::StrJoin(allowed, ", ")));
      }
    }
    return absl::OkStatus();
  }

  std::optional<std::string> Get(absl::string_view key) const {
    std::optional<std::string> out;
    for (const auto& [k, v] : params_) {
      if (k == key) out = v;
    }
    return out;
  }

  std::vector<std::string> All(absl::string_view key) const {
    std::vector<std::string> out;
    for (const auto& [k, v] : params_) {
      if (k == key) out.push_back(v);
    }
    return out;
  }

  template <typename Int>
  absl::Status GetInt(absl::string_view key, Int* out) const {
    std::optional<std::string> v = Get(key);
    if (!v) return absl::OkStatus();
    int64_t n;
    if (!absl::SimpleAtoi(*v, &n) || n < std::numeric_limits<Int>::min() ||
        n > std::numeric_limits<Int>::max()) {
      return absl::InvalidArgumentError(
          absl::StrCat("query parameter ", key, " must be an integer (got \"", *v, "\")"));
    }
    *out = static_cast<Int>(n);
    return absl::OkStatus();
  }

  absl::Status GetBool(absl::string_view key, bool* out) const {
    std::optional<std::string> v = Get(key);
    if (!v) return absl::OkStatus();
    if (*v == "" || *v == "true" || *v == "1") {
      *out = true;
    } else if (*v == "false" || *v == "0") {
      *out = false;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("query parameter ", key, " must be true or false (got \"", *v, "\")"));
    }
    return absl::OkStatus();
  }

 private:
  std::vector<std::pair<std::string, std::string>> params_;
};

// Forwards the caller's credentials: auth is decided by the gRPC services.
absl::Status ForwardCredentials(const Request& http, grpc::ClientContext* ctx) {
  static const std::pair<absl::string_view, absl::string_view> kForwarded[] = {
      {"authorization", "authorization"}, {"x-llamafleet-user", "x-llamafleet-user"}};
  for (const auto& [header, key] : kForwarded) {
    auto it = http.find(boost::beast::string_view(header.data(), header.size()));
    if (it == http.end()) continue;
    const absl::string_view value(it->value().data(), it->value().size());
    for (char c : value) {
      if (c < 0x20 || c > 0x7e) {
        return absl::InvalidArgumentError(
            absl::StrCat("header ", header, " holds characters outside printable ASCII"));
      }
    }
    ctx->AddMetadata(std::string(key), std::string(value));
  }
  return absl::OkStatus();
}

enum class BodyType { kNone, kJson, kYaml, kOther };

BodyType TypeOf(const Request& http) {
  auto it = http.find(bhttp::field::content_type);
  if (it == http.end()) return http.body().empty() ? BodyType::kNone : BodyType::kOther;
  std::string type(it->value().data(), it->value().size());
  type = absl::AsciiStrToLower(absl::StripAsciiWhitespace(type.substr(0, type.find(';'))));
  if (type == "application/json") return BodyType::kJson;
  if (type == "application/yaml" || type == "application/x-yaml" || type == "text/yaml") {
    return BodyType::kYaml;
  }
  return BodyType::kOther;
}

Response UnsupportedType(const Request& http, bool yaml_too) {
  auto it = http.find(bhttp::field::content_type);
  const std::string got =
      it == http.end() ? "none" : std::string(it->value().data(), it->value().size());
  return ErrorResponse(415, "UNSUPPORTED_MEDIA_TYPE",
                       absl::StrCat("Content-Type ", got, " is not accepted here; send ",
                                    yaml_too ? "application/json or application/yaml"
                                             : "application/json"));
}

// Replies 405 unless the method is one of `allowed`.
bool MethodIs(const Request& http, std::initializer_list<bhttp::verb> allowed, Responder& out) {
  for (bhttp::verb v : allowed) {
    if (http.method() == v) return true;
  }
  std::vector<std::string> names;
  for (bhttp::verb v : allowed) {
    boost::beast::string_view s = bhttp::to_string(v);
    names.emplace_back(s.data(), s.size());
  }
  const std::string allow = absl::StrJoin(names, ", ");
  boost::beast::string_view method = http.method_string();
  Response response = ErrorResponse(
      405, "METHOD_NOT_ALLOWED",
      absl::StrCat("method ", absl::string_view(method.data(), method.size()),
                   " is not allowed here; allowed: ", allow));
  response.set(bhttp::field::allow, allow);
  out.Reply(std::move(response));
  return false;
}

std::chrono::system_clock::time_point Deadline(absl::Duration timeout) {
  return std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout);
}

// ---------------------------------------------------------------------------
// Server-streaming calls: SSE with backpressure, or collected into one response.
// ---------------------------------------------------------------------------

// Owns itself from Begin() until gRPC's OnDone. A hold keeps the call open while an event
// is being written, so the next Read is started only once the previous event reached the
// socket; a client that disconnects cancels the call.
template <typename Req, typename Resp>
class StreamCall : public grpc::ClientReadReactor<Resp>,
                   public std::enable_shared_from_this<StreamCall<Req, Resp>> {
 public:
  using Render = std::function<std::string(const Resp&)>;
  // sse: one event per message; otherwise `collect` turns every rendered message into one
  // response when the stream ends.
  StreamCall(std::shared_ptr<Gateway> gateway, std::shared_ptr<Responder> out, bool sse,
             Render render, std::function<Response(std::vector<std::string>)> collect = nullptr)
      : gateway_(std::move(gateway)),
        out_(std::move(out)),
        sse_(sse),
        render_(std::move(render)),
        collect_(std::move(collect)) {
    gateway_->CallStarted(&context_);
  }

  ~StreamCall() override {
    if (sse_) gateway_->ReleaseStream();
    gateway_->CallEnded(&context_);
  }

  grpc::ClientContext* context() { return &context_; }
  Req* request() { return &request_; }

  // After the stub's async()->Method(context(), request(), this). `opening` (an SSE comment)
  // is written at once, so the client sees the response head before the first message.
  void Begin(std::string opening = "") {
    self_ = this->shared_from_this();
    if (sse_) {
      std::weak_ptr<StreamCall> weak = self_;
      out_->OnClose([weak] {
        if (auto call = weak.lock()) call->Abandon();
      });
      if (!opening.empty()) {
        started_ = true;
        out_->SendEvent(std::move(opening), [](bool) {});
      }
    }
    this->AddHold();
    reading_ = true;
    this->StartRead(&message_);
    this->StartCall();
  }

  void OnReadDone(bool ok) override {
    if (ok && !sse_) {
      collected_.push_back(render_(message_));
      this->StartRead(&message_);
      return;
    }
    std::string text = ok ? render_(message_) : "";
    bool release = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      reading_ = false;
      if (!ok || abandoned_) {
        release = TakeHoldLocked();
      } else {
        started_ = true;
      }
    }
    if (release) {
      this->RemoveHold();  // may run OnDone (and free this) inline
      return;
    }
    if (!ok) return;
    std::weak_ptr<StreamCall> weak = this->shared_from_this();
    out_->SendEvent(std::move(text), [weak](bool written) {
      if (auto call = weak.lock()) call->Written(written);
    });
  }

  void OnDone(const grpc::Status& status) override {
    std::shared_ptr<StreamCall> keep = std::move(self_);
    if (!sse_) {
      out_->Reply(status.ok() ? collect_(std::move(collected_)) : GrpcError(status));
      return;
    }
    bool started, abandoned;
    {
      std::lock_guard<std::mutex> lock(mu_);
      started = started_;
      abandoned = abandoned_;
    }
    if (abandoned) return;  // the connection is closed or closing
    if (!started && !status.ok()) {
      out_->Reply(GrpcError(status));  // before any event: a plain HTTP error
      return;
    }
    if (!status.ok()) out_->SendEvent(SseError(status), [](bool) {});
    out_->EndStream();
  }

 private:
  // The previous event is on the socket (or the client is gone).
  void Written(bool ok) {
    bool read = false;
    bool release = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!ok) abandoned_ = true;
      if (abandoned_) {
        release = !reading_ && TakeHoldLocked();
      } else {
        reading_ = true;
        read = true;
      }
    }
    if (read) {
      this->StartRead(&message_);
      return;
    }
    context_.TryCancel();
    if (release) this->RemoveHold();
  }

  // The connection closed under the stream.
  void Abandon() {
    bool release;
    {
      std::lock_guard<std::mutex> lock(mu_);
      abandoned_ = true;
      release = !reading_ && TakeHoldLocked();
    }
    context_.TryCancel();  // a pending Read completes with ok = false and releases the hold
    if (release) this->RemoveHold();
  }

  bool TakeHoldLocked() {
    if (hold_released_) return false;
    hold_released_ = true;
    return true;
  }

  const std::shared_ptr<Gateway> gateway_;
  const std::shared_ptr<Responder> out_;
  const bool sse_;
  const Render render_;
  const std::function<Response(std::vector<std::string>)> collect_;
  grpc::ClientContext context_;
  Req request_;
  Resp message_;  // the message being read; reused after its event is written
  std::vector<std::string> collected_;
  std::shared_ptr<StreamCall> self_;

  std::mutex mu_;
  bool reading_ = false;  // a Read is outstanding
  bool started_ = false;  // an event was handed to the connection
  bool abandoned_ = false;
  bool hold_released_ = false;
};

template <typename Req, typename Resp>
struct UnaryCall {
  grpc::ClientContext context;
  Req request;
  Resp response;
};

}  // namespace

Gateway::Gateway(std::shared_ptr<grpc::Channel> channel, GatewayOptions options)
    : options_(std::move(options)),
      channel_(std::move(channel)),
      jobs_(v1::JobService::NewStub(channel_)),
      workers_(v1::WorkerService::NewStub(channel_)) {}

void Gateway::CallStarted(grpc::ClientContext* context) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  contexts_.insert(context);
  calls_.store(static_cast<int>(contexts_.size()));
  if (stopped_) context->TryCancel();  // before the call starts: it starts cancelled
}

void Gateway::CallEnded(grpc::ClientContext* context) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  contexts_.erase(context);
  calls_.store(static_cast<int>(contexts_.size()));
}

void Gateway::CancelAll() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  stopped_ = true;
  // A cancelled call's callback may run inline and end (unregister) any call, so look the
  // next one up again after each cancel instead of walking a copy.
  std::set<grpc::ClientContext*> cancelled;
  for (;;) {
    grpc::ClientContext* next = nullptr;
    for (grpc::ClientContext* c : contexts_) {
      if (!cancelled.count(c)) {
        next = c;
        break;
      }
    }
    if (next == nullptr) break;
    cancelled.insert(next);
    next->TryCancel();
  }
}

bool Gateway::AcquireStream() {
  if (streams_.fetch_add(1) >= options_.max_event_streams) {
    streams_.fetch_sub(1);
    return false;
  }
  return true;
}

template <typename Req, typename Resp, typename Start>
void Gateway::Unary(const Request& http, std::shared_ptr<Responder> out, Req request, Start start,
                    std::function<Response(const Resp&)> render) {
  auto call = std::make_shared<UnaryCall<Req, Resp>>();
  call->request = std::move(request);
  absl::Status forwarded = ForwardCredentials(http, &call->context);
  if (!forwarded.ok()) {
    out->Reply(AbslError(forwarded));
    return;
  }
  call->context.set_deadline(Deadline(options_.call_timeout));
  CallStarted(&call->context);
  auto self = shared_from_this();
  start(&call->context, &call->request, &call->response,
        [self, call, out, render = std::move(render)](grpc::Status status) {
          out->Reply(status.ok() ? render(call->response) : GrpcError(status));
          self->CallEnded(&call->context);
        });
}

void Gateway::Handle(Request request, std::shared_ptr<Responder> out) {
  const absl::string_view target(request.target().data(), request.target().size());
  const size_t q = target.find('?');
  const absl::string_view raw_path = target.substr(0, q);
  const absl::string_view query = q == absl::string_view::npos ? "" : target.substr(q + 1);
  absl::StatusOr<std::string> decoded = PercentDecode(raw_path, false);
  if (!decoded.ok()) {
    out->Reply(AbslError(decoded.status()));
    return;
  }
  const std::string& path = *decoded;

  if (path == "/healthz") {
    if (!MethodIs(request, {bhttp::verb::get}, *out)) return;
    Response response(bhttp::status::ok, 11);
    response.set(bhttp::field::content_type, "text/plain; charset=utf-8");
    response.body() = "ok\n";
    out->Reply(std::move(response));
    return;
  }
  if (path == "/metrics") {
    if (!MethodIs(request, {bhttp::verb::get}, *out)) return;
    Metrics(request, std::move(out));
    return;
  }
  if (path == "/" || path == "/ui" || absl::StartsWith(path, "/ui/")) {
    Portal(request, path, *out);
    return;
  }
  if (absl::StartsWith(path, kApiPrefix)) {
    Api(request, absl::string_view(path).substr(kApiPrefix.size()), query, std::move(out));
    return;
  }
  out->Reply(NotFound(path));
}

void Gateway::Api(const Request& http, absl::string_view path, absl::string_view query,
                  std::shared_ptr<Responder> out) {
  absl::StatusOr<Query> params = Query::Parse(query);
  if (!params.ok()) {
    out->Reply(AbslError(params.status()));
    return;
  }
  auto only = [&](std::initializer_list<absl::string_view> allowed) {
    absl::Status s = params->Only(allowed);
    if (!s.ok()) out->Reply(AbslError(s));
    return s.ok();
  };
  auto json = [](const auto& message) { return JsonResponse(message); };
  const bhttp::verb kGet = bhttp::verb::get;
  const bhttp::verb kPost = bhttp::verb::post;

  if (path == "whoami") {
    if (!MethodIs(http, {kGet}, *out) || !only({})) return;
    Unary<v1::WhoAmIRequest, v1::WhoAmIResponse>(
        http, out, {},
        [this](auto* ctx, auto* req, auto* resp, auto cb) {
          jobs_->async()->WhoAmI(ctx, req, resp, std::move(cb));
        },
        json);
    return;
  }
  if (path == "jobs") {
    if (!MethodIs(http, {kGet, kPost}, *out)) return;
    if (http.method() == kGet) {
      ListJobs(http, query, std::move(out));
    } else {
      SubmitJob(http, query, std::move(out));
    }
    return;
  }
  if (path == "jobs:batch") {
    if (!MethodIs(http, {kPost}, *out)) return;
    SubmitJobs(http, query, std::move(out));
    return;
  }
  if (path == "workers") {
    if (!MethodIs(http, {kGet}, *out) || !only({})) return;
    Unary<v1::ListWorkersRequest, v1::ListWorkersResponse>(
        http, out, {},
        [this](auto* ctx, auto* req, auto* resp, auto cb) {
          workers_->async()->ListWorkers(ctx, req, resp, std::move(cb));
        },
        json);
    return;
  }
  if (path == "queues") {
    if (!MethodIs(http, {kGet}, *out) || !only({})) return;
    Unary<v1::ListQueuesRequest, v1::ListQueuesResponse>(
        http, out, {},
        [this](auto* ctx, auto* req, auto* resp, auto cb) {
          jobs_->async()->ListQueues(ctx, req, resp, std::move(cb));
        },
        json);
    return;
  }
  if (!absl::StartsWith(path, "jobs/")) {
    out->Reply(NotFound(absl::StrCat(kApiPrefix, path)));
    return;
  }
  // jobs/{id}, jobs/{id}:cancel, jobs/{id}/{events,logs,checkpoints,attempts,metrics}
  absl::string_view rest = path.substr(5);
  const size_t slash = rest.find('/');
  absl::string_view id_part = rest.substr(0, slash);
  const absl::string_view sub = slash == absl::string_view::npos ? "" : rest.substr(slash + 1);
  const bool cancel = sub.empty() && absl::ConsumeSuffix(&id_part, ":cancel");
  const std::string id(id_part);
  if (id.empty()) {
    out->Reply(NotFound(absl::StrCat(kApiPrefix, path)));
    return;
  }
  if (cancel) {
    if (!MethodIs(http, {kPost}, *out) || !only({})) return;
    CancelJob(http, id, std::move(out));
    return;
  }
  if (sub.empty()) {
    if (!MethodIs(http, {kGet}, *out) || !only({})) return;
    v1::GetJobRequest request;
    request.set_job_id(id);
    Unary<v1::GetJobRequest, v1::Job>(
        http, out, std::move(request),
        [this](auto* ctx, auto* req, auto* resp, auto cb) {
          jobs_->async()->GetJob(ctx, req, resp, std::move(cb));
        },
        json);
    return;
  }
  if (sub == "events") {
    if (!MethodIs(http, {kGet}, *out)) return;
    JobEvents(http, id, query, std::move(out));
    return;
  }
  if (sub == "logs") {
    if (!MethodIs(http, {kGet}, *out)) return;
    JobLogs(http, id, query, std::move(out));
    return;
  }
  if (sub == "checkpoints") {
    if (!MethodIs(http, {kGet}, *out) || !only({})) return;
    v1::ListCheckpointsRequest request;
    request.set_job_id(id);
    Unary<v1::ListCheckpointsRequest, v1::ListCheckpointsResponse>(
        http, out, std::move(request),
        [this](auto* ctx, auto* req, auto* resp, auto cb) {
          jobs_->async()->ListCheckpoints(ctx, req, resp, std::move(cb));
        },
        json);
    return;
  }
  if (sub == "attempts") {
    if (!MethodIs(http, {kGet}, *out) || !only({})) return;
    v1::ListAttemptsRequest request;
    request.set_job_id(id);
    Unary<v1::ListAttemptsRequest, v1::ListAttemptsResponse>(
        http, out, std::move(request),
        [this](auto* ctx, auto* req, auto* resp, auto cb) {
          jobs_->async()->ListAttempts(ctx, req, resp, std::move(cb));
        },
        json);
    return;
  }
  if (sub == "metrics") {
    if (!MethodIs(http, {kGet}, *out) || !only({"max_points"})) return;
    v1::GetJobMetricsRequest request;
    request.set_job_id(id);
    int32_t max_points = 0;
    if (absl::Status s = params->GetInt("max_points", &max_points); !s.ok()) {
      out->Reply(AbslError(s));
      return;
    }
    request.set_max_points(max_points);
    Unary<v1::GetJobMetricsRequest, v1::GetJobMetricsResponse>(
        http, out, std::move(request),
        [this](auto* ctx, auto* req, auto* resp, auto cb) {
          jobs_->async()->GetJobMetrics(ctx, req, resp, std::move(cb));
        },
        json);
    return;
  }
  out->Reply(NotFound(absl::StrCat(kApiPrefix, path)));
}

void Gateway::ListJobs(const Request& http, absl::string_view query, std::shared_ptr<Responder> out) {
  absl::StatusOr<Query> params = Query::Parse(query);
  absl::Status s = params.status();
  if (s.ok()) {
    s = params->Only(
        {"state", "queue", "owner", "label", "name", "order_by", "page_size", "page_token", "view"});
  }
  v1::ListJobsRequest request;
  if (s.ok()) {
    // state=A&state=B, or state=A,B.
    for (const std::string& value : params->All("state")) {
      for (absl::string_view name : absl::StrSplit(value, ',', absl::SkipEmpty())) {
        v1::JobState state;
        if (!v1::JobState_Parse(absl::AsciiStrToUpper(name), &state)) {
          s = absl::InvalidArgumentError(absl::StrCat("query parameter state: unknown state \"",
                                                      name, "\""));
          break;
        }
        request.add_states(state);
      }
    }
  }
  // view=basic (the default: what a list shows) or view=full (whole specs).
  if (s.ok()) {
    const std::string view = absl::AsciiStrToUpper(params->Get("view").value_or(""));
    if (view == "FULL" || view == "JOB_VIEW_FULL") {
      request.set_view(v1::JOB_VIEW_FULL);
    } else if (view.empty() || view == "BASIC" || view == "JOB_VIEW_BASIC") {
      request.set_view(v1::JOB_VIEW_BASIC);
    } else {
      s = absl::InvalidArgumentError(absl::StrCat(
          "query parameter view must be basic or full (got \"", *params->Get("view"), "\")"));
    }
  }
  int32_t page_size = 0;
  if (s.ok()) s = params->GetInt("page_size", &page_size);
  request.set_page_size(page_size);
  if (!s.ok()) {
    out->Reply(AbslError(s));
    return;
  }
  request.set_queue(params->Get("queue").value_or(""));
  request.set_owner(params->Get("owner").value_or(""));
  for (const std::string& label : params->All("label")) request.add_labels(label);
  request.set_name_contains(params->Get("name").value_or(""));
  request.set_order_by(params->Get("order_by").value_or(""));
  request.set_page_token(params->Get("page_token").value_or(""));
  Unary<v1::ListJobsRequest, v1::ListJobsResponse>(
      http, out, std::move(request),
      [this](auto* ctx, auto* req, auto* resp, auto cb) {
        jobs_->async()->ListJobs(ctx, req, resp, std::move(cb));
      },
      [](const v1::ListJobsResponse& r) { return JsonResponse(r); });
}

namespace {

// The body of a submission: JSON (the request message itself) or YAML job documents,
// parsed exactly as `llamafleet submit -f` parses them (spec and derived idempotency key)
// and handed to `from_yaml`; then ?dry_run. An error reply, or nullopt when `request` is
// ready to send.
template <typename SubmitRequest>
std::optional<Response> ReadSubmission(
    const Request& http, const Query& params, absl::string_view expected,
    const std::function<absl::Status(std::vector<ParsedJob>)>& from_yaml,
    SubmitRequest* request) {
  if (http.body().empty()) {
    return BadRequest(absl::StrCat("the request body is empty: send ", expected));
  }
  absl::Status s;
  switch (TypeOf(http)) {
    case BodyType::kJson:
      s = FromJson(http.body(), request);
      break;
    case BodyType::kYaml: {
      absl::StatusOr<std::vector<ParsedJob>> parsed = ParseJobDocuments(http.body());
      s = parsed.ok() ? from_yaml(std::move(*parsed)) : parsed.status();
      break;
    }
    default:
      return UnsupportedType(http, true);
  }
  if (s.ok()) {
    bool dry_run = request->dry_run();
    s = params.GetBool("dry_run", &dry_run);
    request->set_dry_run(dry_run);
  }
  if (!s.ok()) return AbslError(s);
  return std::nullopt;
}

}  // namespace

void Gateway::SubmitJob(const Request& http, absl::string_view query, std::shared_ptr<Responder> out) {
  absl::StatusOr<Query> params = Query::Parse(query);
  absl::Status s = params.status();
  if (s.ok()) s = params->Only({"dry_run", "idempotency_key"});
  if (!s.ok()) {
    out->Reply(AbslError(s));
    return;
  }
  v1::SubmitJobRequest request;
  std::optional<Response> error = ReadSubmission(
      http, *params, "a SubmitJobRequest (JSON) or a job document (YAML)",
      [&request](std::vector<ParsedJob> parsed) -> absl::Status {
        if (parsed.size() != 1) {
          return absl::InvalidArgumentError(absl::StrCat("the body holds ", parsed.size(),
                                                         " job documents; POST them to ",
                                                         kApiPrefix, "jobs:batch"));
        }
        *request.mutable_spec() = std::move(parsed[0].spec);
        request.set_idempotency_key(parsed[0].idempotency_key);
        return absl::OkStatus();
      },
      &request);
  if (error.has_value()) {
    out->Reply(std::move(*error));
    return;
  }
  if (std::optional<std::string> key = params->Get("idempotency_key")) {
    request.set_idempotency_key(*key);
  }
  Unary<v1::SubmitJobRequest, v1::SubmitJobResponse>(
      http, out, std::move(request),
      [this](auto* ctx, auto* req, auto* resp, auto cb) {
        jobs_->async()->SubmitJob(ctx, req, resp, std::move(cb));
      },
      [](const v1::SubmitJobResponse& r) {
        return JsonResponse(r, r.created() ? bhttp::status::created : bhttp::status::ok);
      });
}

void Gateway::SubmitJobs(const Request& http, absl::string_view query,
                         std::shared_ptr<Responder> out) {
  absl::StatusOr<Query> params = Query::Parse(query);
  absl::Status s = params.status();
  if (s.ok()) s = params->Only({"dry_run"});
  if (!s.ok()) {
    out->Reply(AbslError(s));
    return;
  }
  v1::SubmitJobsRequest request;
  std::optional<Response> error = ReadSubmission(
      http, *params, "a SubmitJobsRequest (JSON) or job documents (YAML)",
      [&request](std::vector<ParsedJob> parsed) -> absl::Status {
        for (ParsedJob& job : parsed) {
          v1::SubmitJobRequest* item = request.add_jobs();
          *item->mutable_spec() = std::move(job.spec);
          item->set_idempotency_key(job.idempotency_key);
        }
        return absl::OkStatus();
      },
      &request);
  if (error.has_value()) {
    out->Reply(std::move(*error));
    return;
  }
  Unary<v1::SubmitJobsRequest, v1::SubmitJobsResponse>(
      http, out, std::move(request),
      [this](auto* ctx, auto* req, auto* resp, auto cb) {
        jobs_->async()->SubmitJobs(ctx, req, resp, std::move(cb));
      },
      [](const v1::SubmitJobsResponse& r) {
        bool created = false;
        for (const v1::SubmitJobResponse& j : r.jobs()) created = created || j.created();
        return JsonResponse(r, created ? bhttp::status::created : bhttp::status::ok);
      });
}

void Gateway::CancelJob(const Request& http, const std::string& id, std::shared_ptr<Responder> out) {
  v1::CancelJobRequest request;
  if (!http.body().empty()) {
    if (TypeOf(http) != BodyType::kJson) {
      out->Reply(UnsupportedType(http, false));
      return;
    }
    if (absl::Status s = FromJson(http.body(), &request); !s.ok()) {
      out->Reply(AbslError(s));
      return;
    }
  }
  request.set_job_id(id);  // the path names the job
  Unary<v1::CancelJobRequest, v1::CancelJobResponse>(
      http, out, std::move(request),
      [this](auto* ctx, auto* req, auto* resp, auto cb) {
        jobs_->async()->CancelJob(ctx, req, resp, std::move(cb));
      },
      [](const v1::CancelJobResponse& r) { return JsonResponse(r); });
}

void Gateway::JobEvents(const Request& http, const std::string& id, absl::string_view query,
                        std::shared_ptr<Responder> out) {
  absl::StatusOr<Query> params = Query::Parse(query);
  absl::Status s = params.status();
  if (s.ok()) s = params->Only({"after_seq", "limit", "follow"});
  bool follow = false;
  int64_t after_seq = 0;
  int32_t limit = 0;
  if (s.ok()) s = params->GetBool("follow", &follow);
  if (s.ok()) s = params->GetInt("after_seq", &after_seq);
  if (s.ok()) s = params->GetInt("limit", &limit);
  // A reconnecting EventSource-style client resumes after the last event it saw.
  auto last_id = http.find("last-event-id");
  if (s.ok() && follow && !params->Get("after_seq") && last_id != http.end()) {
    if (!absl::SimpleAtoi(absl::string_view(last_id->value().data(), last_id->value().size()),
                          &after_seq)) {
      s = absl::InvalidArgumentError("header Last-Event-ID must be an event seq");
    }
  }
  if (s.ok() && follow && params->Get("limit")) {
    s = absl::InvalidArgumentError("query parameter limit does not apply with follow=true");
  }
  if (!s.ok()) {
    out->Reply(AbslError(s));
    return;
  }
  if (!follow) {
    v1::GetJobEventsRequest request;
    request.set_job_id(id);
    request.set_after_seq(after_seq);
    request.set_limit(limit);
    Unary<v1::GetJobEventsRequest, v1::GetJobEventsResponse>(
        http, out, std::move(request),
        [this](auto* ctx, auto* req, auto* resp, auto cb) {
          jobs_->async()->GetJobEvents(ctx, req, resp, std::move(cb));
        },
        [](const v1::GetJobEventsResponse& r) { return JsonResponse(r); });
    return;
  }
  if (!AcquireStream()) {
    out->Reply(ErrorResponse(503, "UNAVAILABLE", "too many event streams open; retry later"));
    return;
  }
  using Call = StreamCall<v1::WatchJobRequest, v1::WatchJobResponse>;
  auto call = std::make_shared<Call>(shared_from_this(), out, /*sse=*/true,
                                     [](const v1::WatchJobResponse& r) {
                                       return r.has_job() ? SseEvent("job", ToJson(r.job()))
                                                          : SseEvent("event", ToJson(r.event()),
                                                                     r.event().seq());
                                     });
  if (absl::Status f = ForwardCredentials(http, call->context()); !f.ok()) {
    out->Reply(AbslError(f));
    return;
  }
  call->request()->set_job_id(id);
  call->request()->set_after_seq(after_seq);
  jobs_->async()->WatchJob(call->context(), call->request(), call.get());
  call->Begin();
}

void Gateway::JobLogs(const Request& http, const std::string& id, absl::string_view query,
                      std::shared_ptr<Responder> out) {
  absl::StatusOr<Query> params = Query::Parse(query);
  absl::Status s = params.status();
  if (s.ok()) s = params->Only({"attempt", "rank", "tail_lines", "follow"});
  bool follow = false;
  int32_t attempt = 0, rank = -1, tail_lines = 0;  // rank -1: every rank
  if (s.ok()) s = params->GetBool("follow", &follow);
  if (s.ok()) s = params->GetInt("attempt", &attempt);
  if (s.ok()) s = params->GetInt("rank", &rank);
  if (s.ok()) s = params->GetInt("tail_lines", &tail_lines);
  if (!s.ok()) {
    out->Reply(AbslError(s));
    return;
  }
  if (follow && !AcquireStream()) {
    out->Reply(ErrorResponse(503, "UNAVAILABLE", "too many event streams open; retry later"));
    return;
  }
  using Call = StreamCall<v1::StreamJobLogsRequest, v1::LogChunk>;
  std::shared_ptr<Call> call;
  if (follow) {
    call = std::make_shared<Call>(shared_from_this(), out, /*sse=*/true, [](const v1::LogChunk& c) {
      return SseEvent("log", ToJson(c));
    });
  } else {
    call = std::make_shared<Call>(
        shared_from_this(), out, /*sse=*/false, [](const v1::LogChunk& c) { return ToJson(c); },
        [](std::vector<std::string> chunks) {
          Response response(bhttp::status::ok, 11);
          response.set(bhttp::field::content_type, "application/json");
          response.body() = absl::StrCat("{\"chunks\":[", absl::StrJoin(chunks, ","), "]}\n");
          return response;
        });
  }
  if (absl::Status f = ForwardCredentials(http, call->context()); !f.ok()) {
    out->Reply(AbslError(f));
    return;
  }
  if (!follow) call->context()->set_deadline(Deadline(options_.call_timeout));
  v1::StreamJobLogsRequest* request = call->request();
  request->set_job_id(id);
  request->set_attempt(attempt);
  request->set_rank(rank);
  request->set_tail_lines(tail_lines);
  request->set_follow(follow);
  if (!follow) {
    jobs_->async()->StreamJobLogs(call->context(), request, call.get());
    call->Begin();
    return;
  }
  // A log may stay silent for a long time; check the job first (404, 401, ...) so the
  // stream can open at once instead of waiting for the first line.
  auto check = std::make_shared<UnaryCall<v1::GetJobRequest, v1::Job>>();
  ForwardCredentials(http, &check->context).IgnoreError();  // checked above
  check->context.set_deadline(Deadline(options_.call_timeout));
  check->request.set_job_id(id);
  CallStarted(&check->context);
  auto self = shared_from_this();
  jobs_->async()->GetJob(&check->context, &check->request, &check->response,
                         [self, check, call, out](grpc::Status status) {
                           if (status.ok()) {
                             self->jobs_->async()->StreamJobLogs(call->context(), call->request(),
                                                                 call.get());
                             call->Begin(": streaming logs\n\n");
                           } else {
                             out->Reply(GrpcError(status));
                           }
                           self->CallEnded(&check->context);
                         });
}

void Gateway::Metrics(const Request& http, std::shared_ptr<Responder> out) {
  auto call = std::make_shared<UnaryCall<v1::WhoAmIRequest, v1::WhoAmIResponse>>();
  if (absl::Status f = ForwardCredentials(http, &call->context); !f.ok()) {
    out->Reply(AbslError(f));
    return;
  }
  call->context.set_deadline(Deadline(options_.call_timeout));
  CallStarted(&call->context);
  auto self = shared_from_this();
  // Auth lives in the gRPC services; /metrics is not one of them, so ask WhoAmI whether
  // the caller's token is good.
  jobs_->async()->WhoAmI(
      &call->context, &call->request, &call->response, [self, call, out](grpc::Status status) {
        if (status.ok()) {
          Response response(bhttp::status::ok, 11);
          response.set(bhttp::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
          response.body() = self->options_.metrics ? self->options_.metrics() : std::string();
          out->Reply(std::move(response));
        } else {
          out->Reply(GrpcError(status));
        }
        self->CallEnded(&call->context);
      });
}

void Gateway::Authenticate(const Request& header, std::function<void(std::optional<Response>)> done) {
  auto call = std::make_shared<UnaryCall<v1::WhoAmIRequest, v1::WhoAmIResponse>>();
  if (absl::Status f = ForwardCredentials(header, &call->context); !f.ok()) {
    done(AbslError(f));
    return;
  }
  call->context.set_deadline(Deadline(options_.call_timeout));
  CallStarted(&call->context);
  auto self = shared_from_this();
  jobs_->async()->WhoAmI(&call->context, &call->request, &call->response,
                         [self, call, done = std::move(done)](grpc::Status status) {
                           self->CallEnded(&call->context);
                           if (status.ok()) {
                             done(std::nullopt);
                           } else {
                             done(GrpcError(status));
                           }
                         });
}

void Gateway::Portal(const Request& http, absl::string_view path, Responder& out) {
  if (!MethodIs(http, {bhttp::verb::get}, out)) return;
  if (path == "/" || path == "/ui") {
    Response response(bhttp::status::found, 11);
    response.set(bhttp::field::location, "/ui/");
    out.Reply(std::move(response));
    return;
  }
  // Assets by path; any other /ui/ path is a page of the single-page app.
  const portal::Asset* asset =
      absl::StartsWith(path, kStaticPrefix)
          ? portal::FindAsset(std::string_view(path.data() + kStaticPrefix.size(),
                                               path.size() - kStaticPrefix.size()))
          : portal::FindAsset("index.html");
  if (asset == nullptr) {
    out.Reply(ErrorResponse(404, "NOT_FOUND", absl::StrCat("no portal file ", path)));
    return;
  }
  const std::string etag(asset->etag);
  auto match = http.find(bhttp::field::if_none_match);
  bool not_modified = false;
  if (match != http.end()) {
    for (absl::string_view tag :
         absl::StrSplit(absl::string_view(match->value().data(), match->value().size()), ',')) {
      tag = absl::StripAsciiWhitespace(tag);
      absl::ConsumePrefix(&tag, "W/");
      not_modified = not_modified || tag == etag || tag == "*";
    }
  }
  Response response(not_modified ? bhttp::status::not_modified : bhttp::status::ok, 11);
  response.set(bhttp::field::etag, etag);
  // File names are not content-hashed: caches keep them but revalidate (a 304 is cheap).
  response.set(bhttp::field::cache_control, "no-cache");
  if (!not_modified) {
    response.set(bhttp::field::content_type,
                 std::string(asset->content_type.data(), asset->content_type.size()));
    response.body().assign(asset->data.data(), asset->data.size());
  }
  out.Reply(std::move(response));
}

}  // namespace llamafleet::http
