#ifndef LLAMAFLEET_STORAGE_SAMPLE_STORE_H_
#define LLAMAFLEET_STORAGE_SAMPLE_STORE_H_

// The samples of a job's evaluations (eval.samples): one row per (job, step, prompt index)
// in job_samples, deleted with the job. Bounded per job: prompt indexes below
// kMaxSamplesPerStep, the newest kMaxSampleSteps steps, and at most kMaxSampleBytesPerJob
// bytes of text (prompt + text + reference; the newest step always stays); each text cut to
// kMaxSampleTextBytes on a UTF-8 character edge and kMaxSampleScores finite scores.

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "llamafleet/v1/job.pb.h"
#include "storage/job_store.h"

namespace llamafleet {

inline constexpr int kMaxSamplesPerStep = 64;  // SamplesSpec allows at most 64 prompts
inline constexpr int kMaxSampleSteps = 100;
inline constexpr int64_t kMaxSampleBytesPerJob = int64_t{8} << 20;
inline constexpr size_t kMaxSampleTextBytes = 16 << 10;
inline constexpr int kMaxSampleScores = 8;

// `sample` within the bounds above: texts cut on a character edge, stop_reason to 16 bytes,
// the first kMaxSampleScores scores with finite values and names of at most 32 bytes.
v1::Sample BoundedSample(v1::Sample sample);

// Stores `sample` (its attempt, step and index say where; BoundedSample applied; time the
// transaction's) for the job's current attempt while the job is SCHEDULED or RUNNING;
// ignored otherwise, and for a negative step or an index outside [0, kMaxSamplesPerStep).
// A later attempt's sample at the same step and index replaces the earlier one. Then drops
// the job's oldest steps beyond kMaxSampleSteps or kMaxSampleBytesPerJob.
TxnFunction RecordSampleTxn(int64_t job_id, v1::Sample sample);

// The job's samples: all steps (step 0, latest false), one step, or the latest step that
// has any; oldest step first, by index. `steps` lists every stored step, oldest first.
absl::StatusOr<v1::ListSamplesResponse> ListSamples(JobStore& store, int64_t job_id, int64_t step,
                                                    bool latest);

}  // namespace llamafleet

#endif  // LLAMAFLEET_STORAGE_SAMPLE_STORE_H_
