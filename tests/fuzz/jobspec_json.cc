// The JSON bodies of POST /api/v1/jobs and /api/v1/jobs:batch (FromJson, strict), then
// the defaults and the validation of every spec. The first byte picks the request type.
#include "fuzz_check.h"
#include "jobspec/jobspec.h"
#include "server/http/json_errors.h"

using namespace llamafleet;

namespace {
void Check(const v1::JobSpec& parsed) {
  v1::JobSpec spec = parsed;
  ApplyDefaults(&spec);
  absl::Status valid = ValidateJobSpec(spec);
  (void)FieldViolationsOf(valid);
  if (valid.ok()) (void)EstimateJobMemory(spec);
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const absl::string_view body = fuzz::AbslText(data + 1, size - 1);
  if (data[0] & 1) {
    v1::SubmitJobsRequest request;
    absl::Status s = http::FromJson(body, &request);
    (void)FieldViolationsOf(s);
    if (s.ok()) {
      for (const v1::SubmitJobRequest& job : request.jobs()) Check(job.spec());
    }
  } else {
    v1::SubmitJobRequest request;
    absl::Status s = http::FromJson(body, &request);
    (void)FieldViolationsOf(s);
    if (s.ok()) Check(request.spec());
  }
  return 0;
}
