// The parallelism block: tensor-parallel degrees and the data-parallel world.

#include "jobspec/parallelism.h"

#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "jobspec/jobspec.h"
#include "jobspec/memory_estimate.h"

namespace llamafleet {

int TensorParallelOf(const v1::JobSpec& spec) {
  return spec.parallelism().has_tensor_parallel() ? spec.parallelism().tensor_parallel() : 1;
}

namespace jobspec_internal {
namespace {

// What a tensor-parallel degree must divide: each value with how a refusal names it.
struct Divided {
  int64_t value;
  std::string name;
};

std::vector<Divided> WhatTensorParallelDivides(const v1::JobSpec& spec) {
  std::vector<Divided> out;
  const int gpus = spec.resources().gpus_per_node();
  out.push_back({gpus, absl::StrCat("resources.gpus_per_node ", gpus)});
  const v1::FsdpSpec& f = spec.fsdp();
  if (f.sharding() == v1::HYBRID_SHARD && f.hybrid_shard_group_size() >= 1) {
    out.push_back({f.hybrid_shard_group_size(),
                   absl::StrCat("fsdp.hybrid_shard_group_size ", f.hybrid_shard_group_size())});
  }
  if (std::optional<sched::ModelShape> m = sched::PresetShape(spec.model().preset())) {
    out.push_back({m->heads, absl::StrCat("the model's ", m->heads, " attention heads")});
    out.push_back({m->kv_heads, absl::StrCat(m->kv_heads, " KV heads")});
    out.push_back({m->intermediate, absl::StrCat(m->intermediate, " MLP width")});
    out.push_back({m->vocab, absl::StrCat(m->vocab, " vocabulary")});
  }
  return out;
}

}  // namespace

std::vector<int> TensorParallelChoices(const v1::JobSpec& spec) {
  std::vector<int> out;
  const std::vector<Divided> divided = WhatTensorParallelDivides(spec);
  for (int t = 1; t <= spec.resources().gpus_per_node(); ++t) {
    bool ok = true;
    for (const Divided& d : divided) ok = ok && d.value % t == 0;
    if (ok) out.push_back(t);
  }
  return out;
}

void CheckTensorParallel(const v1::JobSpec& spec, Violations& v) {
  if (!spec.parallelism().has_tensor_parallel()) return;
  const int t = spec.parallelism().tensor_parallel();
  if (t < 1) {
    v.Add("parallelism.tensor_parallel", absl::StrCat("must be >= 1 (got ", t, ")"));
    return;
  }
  if (spec.resources().gpus_per_node() < 1) return;  // reported on its own field
  const std::vector<Divided> divided = WhatTensorParallelDivides(spec);
  bool ok = true;
  for (const Divided& d : divided) ok = ok && d.value % t == 0;
  if (ok) return;
  std::vector<std::string> names;
  for (const Divided& d : divided) names.push_back(d.name);
  std::string what = names.back();
  if (names.size() > 1) {
    names.pop_back();
    // "a, b and c" where the model's figures follow the resources': one list.
    what = absl::StrCat(absl::StrJoin(names, ", "), " and ", what);
  }
  v.Add("parallelism.tensor_parallel",
        absl::StrCat("(", t, ") must divide ", what, " (", absl::StrJoin(TensorParallelChoices(spec), ", "),
                     " would)",
                     spec.model().preset().empty()
                         ? "; it must also divide the model's heads, KV heads, MLP width and vocabulary (config.json)"
                         : ""));
}

bool DataParallelWorldIsWhole(const v1::JobSpec& spec) {
  const int t = TensorParallelOf(spec), gpus = spec.resources().gpus_per_node();
  return t >= 1 && gpus >= 1 && gpus % t == 0;
}

int64_t DataParallelRanks(const v1::JobSpec& spec, int64_t nodes) {
  return nodes * (spec.resources().gpus_per_node() / TensorParallelOf(spec));
}

}  // namespace jobspec_internal
}  // namespace llamafleet
