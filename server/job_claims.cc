// JobServiceImpl and the directories jobs claim (storage/dir_claims.h, claim_judge.h):
// the checks of a submission that look at the storage and the recorded claims, and an
// admin's ReleaseDir.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "jobspec/jobspec.h"
#include "server/claim_judge.h"
#include "server/job_paths_check.h"
#include "server/job_service.h"
#include "server/job_service_internal.h"
#include "server/path_resolution.h"
#include "spdlog/spdlog.h"
#include "storage/dir_claims.h"

namespace llamafleet {
namespace {

using job_service_internal::FinishNow;

}  // namespace

absl::Status JobServiceImpl::CheckStorage(const Principal& caller,
                                          std::vector<SubmitJobInput>* inputs,
                                          std::vector<JobPathsVerdict>* verdicts) const {
  const std::vector<std::string> roots =
      policy_.has_value() ? policy_->path_roots : std::vector<std::string>{};
  if (policy_.has_value()) {
    std::vector<std::string> errors;
    std::vector<v1::FieldViolation> violations;
    for (const SubmitJobInput& in : *inputs) {
      absl::Status s = CheckWrittenDirsHaveNoLinks(roots, in.field_prefix, in.spec);
      if (s.ok()) continue;
      errors.emplace_back(s.message());
      for (v1::FieldViolation& v : FieldViolationsOf(s)) violations.push_back(std::move(v));
    }
    if (!errors.empty()) {
      return WithFieldViolations(absl::InvalidArgumentError(absl::StrJoin(errors, "; ")),
                                 violations);
    }
    for (const SubmitJobInput& in : *inputs) {
      LF_RETURN_IF_ERROR(CheckCheckpointReads(caller, in.spec, in.field_prefix));
    }
    if (policy_->check_paths) {
      const std::vector<JobRunAs> run_as = JobRunIdentities(identities_, caller.user);
      for (const SubmitJobInput& in : *inputs) {
        JobPathsVerdict verdict = CheckJobPaths(roots, run_as, in.field_prefix, in.spec,
                                                in.submitted_spec.value_or(in.spec));
        LF_RETURN_IF_ERROR(verdict.status);
        if (verdicts != nullptr) verdicts->push_back(std::move(verdict));
      }
    }
  }
  // A submission whose idempotency key its owner already used returns that job: its
  // directories are claimed already, by that job.
  LF_ASSIGN_OR_RETURN(std::vector<bool> known, KnownSubmissions(*store_, *inputs));
  const ClaimJudge judge(roots, policy_.has_value() ? identities_ : nullptr);
  LF_RETURN_IF_ERROR(judge.MarkPendingClaims(*store_, inputs));
  // What the store's transaction would refuse, refused the same way, before ownership: a
  // directory another job holds is named as that job's.
  LF_RETURN_IF_ERROR(CheckJobDirsFree(*store_, *inputs, known));
  for (size_t i = 0; i < inputs->size(); ++i) {
    const SubmitJobInput& in = (*inputs)[i];
    if (known[i]) continue;
    LF_RETURN_IF_ERROR(judge.CheckClaimable(caller.user, in.field_prefix, in.spec));
  }
  return absl::OkStatus();
}

absl::Status JobServiceImpl::CheckCheckpointReads(const Principal& caller, const v1::JobSpec& spec,
                                                  const std::string& prefix) const {
  if (caller.role == v1::ADMIN) return absl::OkStatus();
  const std::vector<std::string>& roots = policy_->path_roots;
  const ClaimJudge judge(roots, identities_);
  for (const auto& [field, path] : {std::pair<absl::string_view, const std::string*>{
                                        "checkpoint.resume", &spec.checkpoint().resume()},
                                    {"model.path", &spec.model().path()}}) {
    if (path->empty() || *path == "latest") continue;
    auto denied = [&, field = field, path = path](const std::string& why) {
      v1::FieldViolation v;
      v.set_field(absl::StrCat(prefix, field));
      v.set_description(why);
      return WithFieldViolations(
          absl::PermissionDeniedError(absl::StrCat(
              prefix, field, " ", *path, " ", why,
              "; only that job's owner or an admin may read it (user ", caller.user, ")")),
          {v});
    };
    // Judged as written and as the storage resolves it (a link of the caller's may lead
    // into another job's directory).
    std::vector<std::string> candidates = {*path};
    if (std::optional<std::string> resolved = ResolveBelowRoot(roots, *path);
        resolved && *resolved != *path) {
      candidates.push_back(*resolved);
    }
    for (const std::string& p : candidates) {
      const std::string via = p == *path ? "" : absl::StrCat("(through a link, ", p, ") ");
      if (std::optional<int64_t> id = DefaultCheckpointDirJob(roots, p)) {
        absl::StatusOr<v1::Job> job = store_->GetJob(*id);
        if (!job.ok() && job.status().code() != absl::StatusCode::kNotFound) return job.status();
        if (!job.ok())
          return denied(
              absl::StrCat(via, "is a checkpoint of job ", *id, ", which no longer exists"));
        if (job->owner() != caller.user) {
          return denied(
              absl::StrCat(via, "is a checkpoint of job ", *id, ", owned by ", job->owner()));
        }
        continue;
      }
      if (std::optional<std::string> reserved = InsideReservedDir(roots, p)) {
        return denied(
            absl::StrCat(via, "is inside ", *reserved, ", which holds jobs' checkpoints"));
      }
      LF_ASSIGN_OR_RETURN(std::vector<DirClaim> claims, CheckpointClaimsOver(*store_, p));
      for (const DirClaim& c : claims) {
        if (c.owner != caller.user && judge.IsReal(c)) {
          return denied(
              absl::StrCat(via, "is inside ", c.dir, ", ", c.Describe(), ", owned by ", c.owner));
        }
      }
    }
  }
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* JobServiceImpl::ReleaseDir(grpc::CallbackServerContext* context,
                                                     const v1::ReleaseDirRequest* request,
                                                     v1::ReleaseDirResponse* response) {
  absl::StatusOr<Principal> caller = auth_->Check(*context, Operation::kReleaseDir);
  if (!caller.ok()) return FinishNow(context, caller.status());
  std::optional<std::string> path = NormalizeAbsolutePath(request->path());
  if (!path.has_value() || request->path().size() > static_cast<size_t>(kMaxPathLength)) {
    return FinishNow(context, absl::InvalidArgumentError(absl::StrCat(
                                  "path must be an absolute path of at most ", kMaxPathLength,
                                  " bytes, got '", request->path().substr(0, 256), "'")));
  }
  auto released = std::make_shared<std::vector<DirClaim>>();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  store_->Write(ReleaseDirClaimsTxn(*path, caller->user, released),
                [reactor, response, released, actor = caller->user](absl::Status s) {
                  if (!s.ok()) {
                    reactor->Finish(ToGrpcStatus(s));
                    return;
                  }
                  for (const DirClaim& c : *released) {
                    const std::string line =
                        absl::StrCat(c.field, " of ", c.deleted ? "deleted job " : "job ", c.job_id,
                                     " (", c.owner, ")");
                    // A live job's release is one of its events; a deleted job's has no record to
                    // go in.
                    spdlog::warn("claim on {} released by {}: {}", c.dir, actor, line);
                    response->add_released(line);
                  }
                  reactor->Finish(grpc::Status::OK);
                });
  return reactor;
}

}  // namespace llamafleet
