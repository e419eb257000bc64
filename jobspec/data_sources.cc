#include "jobspec/data_sources.h"

#include "absl/strings/str_cat.h"

namespace llamafleet {
namespace {

v1::DataFormat FormatOr(v1::DataFormat own, const v1::JobSpec& spec) {
  if (own != v1::DATA_FORMAT_UNSPECIFIED) return own;
  return spec.data().format() == v1::DATA_FORMAT_UNSPECIFIED ? v1::TEXT : spec.data().format();
}

}  // namespace

std::vector<TrainSource> TrainSourcesOf(const v1::JobSpec& spec) {
  std::vector<TrainSource> out;
  const v1::DataSpec& d = spec.data();
  if (d.train_size() == 0) {
    if (!d.train_path().empty())
      out.push_back(
          {"data.train_path", d.train_path(), FormatOr(v1::DATA_FORMAT_UNSPECIFIED, spec), 1});
    return out;
  }
  for (int i = 0; i < d.train_size(); ++i) {
    const v1::DataSource& s = d.train(i);
    out.push_back({absl::StrCat("data.train[", i, "].path"), s.path(), FormatOr(s.format(), spec),
                   s.has_weight() ? s.weight() : 1.0});
  }
  return out;
}

std::vector<EvalSource> EvalSetsOf(const v1::JobSpec& spec) {
  std::vector<EvalSource> out;
  const v1::DataSpec& d = spec.data();
  if (d.eval_size() == 0) {
    if (!d.eval_path().empty()) {
      out.push_back({"data.eval_path", kDefaultEvalSetName, d.eval_path(),
                     FormatOr(v1::DATA_FORMAT_UNSPECIFIED, spec)});
    }
    return out;
  }
  for (int i = 0; i < d.eval_size(); ++i) {
    const v1::EvalSet& s = d.eval(i);
    out.push_back(
        {absl::StrCat("data.eval[", i, "].path"), s.name(), s.path(), FormatOr(s.format(), spec)});
  }
  return out;
}

bool HasEvalData(const v1::JobSpec& spec) { return !EvalSetsOf(spec).empty(); }

bool DataNeedsTokenizer(const v1::JobSpec& spec) {
  for (const TrainSource& s : TrainSourcesOf(spec)) {
    if (s.format != v1::TOKENS) return true;
  }
  for (const EvalSource& s : EvalSetsOf(spec)) {
    if (s.format != v1::TOKENS) return true;
  }
  // No file at all: what data.format says (the shorthand's rule).
  return TrainSourcesOf(spec).empty() && FormatOr(v1::DATA_FORMAT_UNSPECIFIED, spec) != v1::TOKENS;
}

std::vector<std::pair<std::string, std::string*>> MutableDataPathFields(v1::JobSpec* spec) {
  v1::DataSpec* d = spec->mutable_data();
  std::vector<std::pair<std::string, std::string*>> out = {
      {"data.train_path", d->mutable_train_path()}, {"data.eval_path", d->mutable_eval_path()}};
  for (int i = 0; i < d->train_size(); ++i) {
    out.push_back({absl::StrCat("data.train[", i, "].path"), d->mutable_train(i)->mutable_path()});
  }
  for (int i = 0; i < d->eval_size(); ++i) {
    out.push_back({absl::StrCat("data.eval[", i, "].path"), d->mutable_eval(i)->mutable_path()});
  }
  return out;
}

}  // namespace llamafleet
