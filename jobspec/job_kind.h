#ifndef LLAMAFLEET_JOBSPEC_JOB_KIND_H_
#define LLAMAFLEET_JOBSPEC_JOB_KIND_H_

// JobSpec.kind: what a job does. "train" (the default, also written as "") finetunes;
// "evaluate" loads model.path (with peft.adapter_path when set) and scores it on the
// eval sets (data.eval or data.eval_path) as a training run's evaluation does, without
// training: no optimizer, no checkpoint, no export (docs/jobspec.md#evaluation-jobs).

#include "absl/strings/string_view.h"
#include "jobspec/field_violations.h"
#include "llamafleet/v1/job.pb.h"

namespace llamafleet {

inline constexpr char kJobKindTrain[] = "train";
inline constexpr char kJobKindEvaluate[] = "evaluate";

// Whether `spec` is an evaluation job (kind "evaluate").
bool IsEvaluateJob(const v1::JobSpec& spec);

namespace jobspec_internal {

// kind is "", "train" or "evaluate". An evaluation job needs model.path (a preset's
// seeded weights score nothing a user trained), an eval set, and with peft the adapter
// to score (peft.adapter_path); every field only training reads is refused by its name
// (data.train*, training's optimizer, schedule, step count and batch accumulation,
// checkpoint.*, output.*), so a spec copied from a finetune says what it would ignore.
void CheckJobKind(const v1::JobSpec& spec, Violations& v);

// ApplyDefaults' part for an evaluation job: only what an evaluation reads (micro-batch,
// sequence length, batching, seed); the training-only fields stay unset.
void ApplyEvaluateDefaults(v1::JobSpec* spec);

}  // namespace jobspec_internal
}  // namespace llamafleet

#endif  // LLAMAFLEET_JOBSPEC_JOB_KIND_H_
