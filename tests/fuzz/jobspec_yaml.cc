// Job files as `llamafleet submit -f` and POST /api/v1/jobs (YAML) read them: parse, then
// for every document its sweep's points (one spec without a sweep), then for each the
// defaults, the validation with field positions, and the memory estimate. Properties: a parsed spec written back as YAML (MessageToYaml) parses to the
// same spec; a refusal, as the HTTP API answers it (StatusError), is valid JSON.
#include <google/protobuf/util/message_differencer.h>

#include "fuzz_check.h"
#include "jobspec/jobspec.h"
#include "jobspec/sweep.h"
#include "nlohmann/json.hpp"
#include "server/http/json_errors.h"

using namespace llamafleet;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<std::vector<ParsedJob>> jobs = ParseJobDocuments(fuzz::AbslText(data, size));
  if (!jobs.ok()) {
    FUZZ_CHECK(jobs.status().code() == absl::StatusCode::kInvalidArgument, "%s",
               jobs.status().ToString().c_str());
    const std::string body = http::StatusError(jobs.status()).body();
    FUZZ_CHECK(!nlohmann::json::parse(body, nullptr, false).is_discarded(), "error body is not JSON: %s",
               body.c_str());
    return 0;
  }
  FUZZ_CHECK(!jobs->empty() && jobs->size() <= static_cast<size_t>(kMaxBatchSize), "%zu jobs", jobs->size());
  for (size_t i = 0; i < jobs->size(); ++i) {
    const ParsedJob& job = (*jobs)[i];
    // As the coordinator takes it: a sweep's points, each with defaults, validated.
    absl::StatusOr<std::vector<v1::JobSpec>> points = ExpandSweep(job.spec, "jobs[0].spec.");
    if (points.ok()) {
      FUZZ_CHECK(!points->empty() && points->size() <= static_cast<size_t>(kMaxSweepPoints), "%zu points",
                 points->size());
      for (v1::JobSpec& spec : *points) {
        ApplyDefaults(&spec);
        absl::Status valid =
            LocateFieldViolations(ValidateJobSpec(spec, "jobs[0].spec."), job.positions, "jobs[0].spec.");
        (void)LocatedFieldViolationsOf(valid);
        if (valid.ok()) (void)EstimateJobMemory(spec);
      }
    } else {
      FUZZ_CHECK(points.status().code() == absl::StatusCode::kInvalidArgument, "%s",
                 points.status().ToString().c_str());
    }

    const std::string yaml = MessageToYaml(job.spec);
    absl::StatusOr<std::vector<ParsedJob>> again = ParseJobDocuments(yaml);
    if (job.spec.ByteSizeLong() == 0) continue;  // an empty spec renders as "{}"
    FUZZ_CHECK(again.ok(), "document %zu written back does not parse: %s\n%s", i + 1,
               again.status().ToString().c_str(), yaml.c_str());
    FUZZ_CHECK(again->size() == 1 && google::protobuf::util::MessageDifferencer::Equals((*again)[0].spec, job.spec),
               "document %zu written back parses to another spec:\n%s", i + 1, yaml.c_str());
  }
  return 0;
}
