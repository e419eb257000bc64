#include "clients/cli/evaluation_line.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "jobspec/data_sources.h"
#include "jobspec/job_kind.h"

namespace llamafleet::cli {

std::string EvaluationLine(const v1::JobSpec& spec) {
  if (!IsEvaluateJob(spec)) return "";
  std::vector<std::string> names;
  for (const EvalSource& s : EvalSetsOf(spec)) names.push_back(s.name);
  const std::string& adapter = spec.peft().adapter_path();
  return absl::StrCat("scores ", spec.model().path(), adapter.empty() ? "" : " with the adapter ",
                      adapter, " on ", names.size() == 1 ? "eval set " : "eval sets ",
                      absl::StrJoin(names, ", "), " (no training: no checkpoint, no export)");
}

}  // namespace llamafleet::cli
