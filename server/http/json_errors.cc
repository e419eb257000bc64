#include "server/http/json_errors.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/util/json_util.h>

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "jobspec/grpc_status.h"
#include "jobspec/jobspec.h"
#include "nlohmann/json.hpp"

namespace llamafleet::http {

namespace bhttp = boost::beast::http;
using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;

Response ErrorResponse(int http_status, absl::string_view status, absl::string_view message,
                       const std::vector<v1::FieldViolation>& violations) {
  auto quote = [](absl::string_view s) {
    return nlohmann::json(std::string(s)).dump(-1, ' ', false,
                                               nlohmann::json::error_handler_t::replace);
  };
  std::vector<std::string> items;
  items.reserve(violations.size());
  for (const v1::FieldViolation& v : violations) items.push_back(MessageToJson(v));
  return BodyResponse(static_cast<bhttp::status>(http_status), "application/json",
                      absl::StrCat("{\"error\":{\"code\":", http_status,
                                   ",\"status\":", quote(status), ",\"message\":", quote(message),
                                   ",\"field_violations\":[", absl::StrJoin(items, ","), "]}}\n"));
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

namespace {

Response CodeError(int code, absl::string_view message,
                   const std::vector<v1::FieldViolation>& violations) {
  return ErrorResponse(HttpStatusFor(static_cast<grpc::StatusCode>(code)),
                       absl::StatusCodeToString(static_cast<absl::StatusCode>(code)), message,
                       violations);
}

}  // namespace

Response GrpcError(const grpc::Status& status) { return StatusError(FromGrpcStatus(status)); }

Response StatusError(const absl::Status& status) {
  return CodeError(static_cast<int>(status.code()), status.message(), FieldViolationsOf(status));
}

Response NotFound(absl::string_view path) {
  return ErrorResponse(404, "NOT_FOUND", absl::StrCat("no route for ", path));
}

Response MethodNotAllowed(const Request& http, const std::vector<std::string>& allowed) {
  const std::string allow = absl::StrJoin(allowed, ", ");
  boost::beast::string_view method = http.method_string();
  Response response = ErrorResponse(
      405, "METHOD_NOT_ALLOWED",
      absl::StrCat("method ", absl::string_view(method.data(), method.size()),
                   " is not allowed here; allowed: ", allow));
  response.set(bhttp::field::allow, allow);
  return response;
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

Response JsonResponse(const google::protobuf::Message& message, bhttp::status status) {
  return BodyResponse(status, "application/json", MessageToJson(message) + "\n");
}

Response BodyResponse(bhttp::status status, absl::string_view content_type, std::string body) {
  Response response(status, 11);
  response.set(bhttp::field::content_type, std::string(content_type));
  response.body() = std::move(body);
  return response;
}

namespace {

// The keys of `value` (a JSON object for a message of type `d`) that name no field, as
// violations with their paths. Well-known types have JSON forms of their own: not walked.
void UnknownFields(const nlohmann::json& value, const Descriptor* d, const std::string& path,
                   std::vector<v1::FieldViolation>* out) {
  if (!value.is_object() || absl::StartsWith(d->file()->name(), "google/protobuf/")) return;
  for (const auto& [key, child] : value.items()) {
    const FieldDescriptor* f = d->FindFieldByName(key);
    if (f == nullptr) f = d->FindFieldByCamelcaseName(key);
    if (f == nullptr) {
      v1::FieldViolation v;
      v.set_field(absl::StrCat(path, key));
      v.set_description(absl::StrCat("unknown field of ", d->name()));
      out->push_back(std::move(v));
      continue;
    }
    if (f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) continue;
    if (f->is_map()) {
      const FieldDescriptor* mapped = f->message_type()->map_value();
      if (mapped->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE || !child.is_object()) continue;
      for (const auto& [k, item] : child.items()) {
        UnknownFields(item, mapped->message_type(), absl::StrCat(path, key, ".", k, "."), out);
      }
    } else if (f->is_repeated()) {
      if (!child.is_array()) continue;
      for (size_t i = 0; i < child.size(); ++i) {
        UnknownFields(child[i], f->message_type(), absl::StrCat(path, key, "[", i, "]."), out);
      }
    } else {
      UnknownFields(child, f->message_type(), absl::StrCat(path, key, "."), out);
    }
  }
}

// Counts the values of a JSON text (as a parse would build them) and stops past the cap;
// builds nothing.
class ValueCounter : public nlohmann::json_sax<nlohmann::json> {
 public:
  bool null() override { return Count(); }
  bool boolean(bool) override { return Count(); }
  bool number_integer(number_integer_t) override { return Count(); }
  bool number_unsigned(number_unsigned_t) override { return Count(); }
  bool number_float(number_float_t, const string_t&) override { return Count(); }
  bool string(string_t&) override { return Count(); }
  bool binary(binary_t&) override { return Count(); }
  bool start_object(std::size_t) override { return Count(); }
  bool key(string_t&) override { return true; }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return Count(); }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }
  bool over() const { return values_ > kMaxYamlNodes; }

 private:
  bool Count() { return ++values_ <= kMaxYamlNodes; }
  int64_t values_ = 0;
};

}  // namespace

absl::Status FromJson(absl::string_view body, google::protobuf::Message* message) {
  // The same cap as a YAML job file's, before anything is built from the body.
  ValueCounter counter;
  nlohmann::json::sax_parse(body.begin(), body.end(), &counter, nlohmann::json::input_format_t::json,
                            /*strict=*/false);
  if (counter.over()) {
    return absl::InvalidArgumentError(absl::StrCat("invalid JSON body for ", message->GetDescriptor()->name(),
                                                   ": more than ", kMaxYamlNodes, " values"));
  }
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  auto status = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(body.data(), body.size()), message, options);
  if (status.ok()) return absl::OkStatus();
  absl::Status error = absl::InvalidArgumentError(absl::StrCat(
      "invalid JSON body for ", message->GetDescriptor()->name(), ": ",
      absl::string_view(status.message().data(), status.message().size())));
  // Only on the error path: name each unknown field by its path.
  const nlohmann::json parsed = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  std::vector<v1::FieldViolation> unknown;
  if (!parsed.is_discarded()) UnknownFields(parsed, message->GetDescriptor(), "", &unknown);
  return unknown.empty() ? error : WithFieldViolations(error, unknown);
}

}  // namespace llamafleet::http
