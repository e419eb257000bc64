// `resubmit ID [--set key=value]...`: run a job again from its spec as submitted.
#include <ostream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "clients/cli/command.h"
#include "clients/cli/output.h"
#include "common/sha256.h"
#include "common/status_macros.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "jobspec/jobspec.h"

namespace llamafleet::cli {
namespace {

// "resubmit-<job>-<32 hex digits of the spec's deterministic serialization>": the same
// command run again (a retry after a lost answer) finds the job it made; other changes,
// or another source job, make another.
std::string ResubmitKey(const std::string& id, const v1::JobSpec& spec) {
  std::string canonical;
  {
    google::protobuf::io::StringOutputStream out(&canonical);
    google::protobuf::io::CodedOutputStream coded(&out);
    coded.SetSerializationDeterministic(true);
    spec.SerializeToCodedStream(&coded);
  }
  return absl::StrCat("resubmit-", id, "-", Sha256Hex(canonical).substr(0, 32));
}

// The coordinator's refusal, with what to do when the source job keeps its export dir.
absl::Status ResubmitError(const absl::Status& status, const v1::Job& source) {
  if (!absl::IsFailedPrecondition(status) ||
      !absl::StrContains(status.message(), "output.export_dir")) {
    return status;
  }
  return absl::FailedPreconditionError(
      absl::StrCat(status.message(), " (job ", source.id(), " ", v1::JobState_Name(source.state()),
                   ": only a FAILED or CANCELLED job of yours hands its export dir over, having "
                   "never completed an export); "
                   "give the new job another with --set output.export_dir=DIR"));
}

}  // namespace

absl::Status RunResubmit(const Context& ctx, const std::string& id, const ResubmitFlags& flags) {
  LF_RETURN_IF_ERROR(CheckOverrides(flags.overrides));
  LF_ASSIGN_OR_RETURN(Client* client, Connect(ctx));
  LF_ASSIGN_OR_RETURN(v1::Job source, client->GetJob(id));
  // A coordinator older than Job.submitted_spec sends none: the effective spec then.
  v1::JobSpec spec = source.has_submitted_spec() ? source.submitted_spec() : source.spec();
  for (const std::string& o : flags.overrides) {
    if (absl::Status s = ApplySetOverride(&spec, o); !s.ok())
      return UsageError(std::string(s.message()));
  }
  v1::SubmitJobRequest request;
  request.set_idempotency_key(ResubmitKey(source.id(), spec));
  *request.mutable_spec() = std::move(spec);
  request.set_derived_from(source.id());
  request.set_dry_run(flags.dry_run);
  absl::StatusOr<v1::SubmitJobResponse> response = client->SubmitJob(request);
  if (!response.ok()) return ResubmitError(response.status(), source);
  if (!PrintMachine(ctx, *response)) {
    if (flags.dry_run) {
      *ctx.out << "# " << response->job().spec().name() << ": valid (dry run of resubmitting job "
               << source.id() << ", nothing stored)\n"
               << ToYaml(response->job().spec());
    } else {
      *ctx.out << SubmittedLine(*response) << "\n";
    }
  }
  if (!flags.wait || flags.dry_run) return absl::OkStatus();
  ctx.out->flush();
  return RunWait(ctx, {response->job().id()}, /*succeeded_only=*/true);
}

}  // namespace llamafleet::cli
