#include "server/auth.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/random_hex.h"
#include "common/status_macros.h"
#include "jobspec/jobspec.h"
#include "server/auth_failures.h"
#include "storage/job_store.h"
#include "storage/sqlite.h"

namespace llamafleet {
namespace {

constexpr char kBearer[] = "Bearer ";
constexpr char kTokenPrefix[] = "lft_";
constexpr char kUserMetadataKey[] = "x-llamafleet-user";
constexpr char kHowToGetToken[] =
    "send 'authorization: Bearer <token>' (an admin creates one with: llamafleet-coordinator "
    "token create --data-dir DIR --user NAME --role viewer|user|admin)";

std::string Metadata(const grpc::CallbackServerContext& context, const char* key) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(key);
  if (it == metadata.end()) return "";
  return std::string(it->second.data(), it->second.size());
}

}  // namespace

absl::Status ValidateUserName(const std::string& user, const std::string& field) {
  if (user.empty() || user.size() > 64 ||
      !std::all_of(user.begin(), user.end(), [](char c) {
        return absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' || c == '@';
      })) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " must be 1..64 characters of letters, digits, '-', '_', '.' and '@'"));
  }
  return absl::OkStatus();
}

Authenticator::Authenticator(JobStore* store, bool enabled) : store_(store), enabled_(enabled) {}

absl::StatusOr<Principal> Authenticator::Authenticate(
    const grpc::CallbackServerContext& context) const {
  if (!enabled_) {
    Principal p;
    p.user = Metadata(context, kUserMetadataKey);
    if (p.user.empty()) p.user = "anonymous";
    LF_RETURN_IF_ERROR(ValidateUserName(p.user, absl::StrCat("metadata ", kUserMetadataKey)));
    p.role = v1::ADMIN;
    return p;
  }
  const std::string authorization = Metadata(context, "authorization");
  if (failures_ == nullptr) return AuthenticateBearer(authorization);
  const std::string peer = failures_->CallerAddress(context.peer(), Metadata(context, kForwardedPeerKey),
                                                    Metadata(context, kForwardedPeerProofKey));
  LF_RETURN_IF_ERROR(failures_->CheckPeer(peer));
  absl::StatusOr<Principal> p = AuthenticateBearer(authorization);
  // A token that was presented and is wrong counts; a call with none only learns how to
  // get one.
  if (absl::IsUnauthenticated(p.status()) && !authorization.empty()) {
    failures_->RecordFailure(peer, p.status().message());
  }
  return p;
}


absl::StatusOr<Principal> Authenticator::AuthenticateBearer(absl::string_view header) const {
  if (header.empty()) {
    return absl::UnauthenticatedError(absl::StrCat("missing credentials: ", kHowToGetToken));
  }
  if (!absl::StartsWithIgnoreCase(header, kBearer) || header.size() > 512) {
    return absl::UnauthenticatedError("malformed authorization: expected 'Bearer <token>'");
  }
  const std::string hash =
      Sha256Hex(absl::StripAsciiWhitespace(header.substr(sizeof(kBearer) - 1)));
  Principal p;
  bool found = false;
  absl::Status s = store_->Read([&](sqlite::Connection& conn) -> absl::Status {
    // Every call runs this: prepared once per connection; a lookup in token_sha256's index.
    LF_ASSIGN_OR_RETURN(
        auto* cached,
        conn.Cached("SELECT user, role FROM api_tokens WHERE token_sha256 = ?1 AND revoked = 0"));
    sqlite::Statement& q = *cached;
    q.Bind(1, hash);
    absl::StatusOr<bool> row = q.Step();
    if (row.ok() && *row) {
      found = true;
      p.user = q.ColumnText(0);
      p.role = static_cast<v1::Role>(q.ColumnInt(1));
    }
    q.Reset();
    return row.status();
  });
  if (!s.ok()) return absl::UnavailableError(absl::StrCat("cannot check credentials: ", s.message()));
  if (!found) return absl::UnauthenticatedError("invalid or revoked token");
  return p;
}

absl::StatusOr<Principal> Authenticator::Check(const grpc::CallbackServerContext& context,
                                               Operation op, const std::string& job_owner) const {
  LF_ASSIGN_OR_RETURN(Principal p, Authenticate(context));
  LF_RETURN_IF_ERROR(Authorize(p, op, job_owner));
  return p;
}

absl::StatusOr<std::string> CreateApiToken(JobStore* store, const std::string& user,
                                           v1::Role role) {
  LF_RETURN_IF_ERROR(ValidateUserName(user, "user"));
  if (role != v1::VIEWER && role != v1::USER && role != v1::ADMIN) {
    return absl::InvalidArgumentError("role must be one of viewer, user, admin");
  }
  std::optional<std::string> random = RandomHex(32);
  if (!random.has_value()) return absl::InternalError("no randomness available for a token");
  const std::string token = absl::StrCat(kTokenPrefix, *random);
  const std::string hash = Sha256Hex(token);
  LF_RETURN_IF_ERROR(store->WriteAndWait([&](Txn& txn) -> absl::Status {
    LF_ASSIGN_OR_RETURN(
        auto* q,
        txn.Statement(
            "INSERT INTO api_tokens (token_sha256, user, role, create_time_us) VALUES (?1, ?2, ?3, "
            "?4)"));
    q->Bind(1, hash).Bind(2, user).Bind(3, static_cast<int64_t>(role)).Bind(4, txn.NowMicros());
    return q->Run();
  }));
  return token;
}

absl::StatusOr<std::vector<ApiTokenRecord>> ListApiTokens(JobStore* store) {
  std::vector<ApiTokenRecord> out;
  LF_RETURN_IF_ERROR(store->Read([&](sqlite::Connection& conn) -> absl::Status {
    LF_ASSIGN_OR_RETURN(
        sqlite::Statement q,
        conn.Prepare("SELECT id, user, role, create_time_us, revoked FROM api_tokens ORDER BY id"));
    while (true) {
      LF_ASSIGN_OR_RETURN(bool row, q.Step());
      if (!row) break;
      ApiTokenRecord r;
      r.id = q.ColumnInt(0);
      r.user = q.ColumnText(1);
      r.role = static_cast<v1::Role>(q.ColumnInt(2));
      r.create_time_us = q.ColumnInt(3);
      r.revoked = q.ColumnInt(4) != 0;
      out.push_back(std::move(r));
    }
    return absl::OkStatus();
  }));
  return out;
}

absl::Status RevokeApiToken(JobStore* store, int64_t id) {
  bool found = false;
  LF_RETURN_IF_ERROR(store->WriteAndWait([&](Txn& txn) -> absl::Status {
    LF_ASSIGN_OR_RETURN(auto* q, txn.Statement("UPDATE api_tokens SET revoked = 1 WHERE id = ?1"));
    q->Bind(1, id);
    LF_RETURN_IF_ERROR(q->Run());
    found = txn.Changes() > 0;
    return absl::OkStatus();
  }));
  if (!found) return absl::NotFoundError(absl::StrCat("no token with id ", id));
  return absl::OkStatus();
}

}  // namespace llamafleet
