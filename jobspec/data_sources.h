#ifndef LLAMAFLEET_JOBSPEC_DATA_SOURCES_H_
#define LLAMAFLEET_JOBSPEC_DATA_SOURCES_H_

// The data files of a job spec: its training sources and evaluation sets, whether the spec
// lists them (data.train, data.eval) or writes the one-file shorthand (data.train_path,
// data.eval_path), each with the field that names it for error messages. Every component
// that reads, checks or rewrites a data path goes through these, so the lists and the
// shorthands mean the same everywhere.

#include <string>
#include <utility>
#include <vector>

#include "llamafleet/v1/job.pb.h"

namespace llamafleet {

// The name of data.eval_path's set (its metrics: the trainer's unnamed eval line).
inline constexpr char kDefaultEvalSetName[] = "eval";
// Bounds on the lists.
inline constexpr int kMaxTrainSources = 64;
inline constexpr int kMaxEvalSets = 16;
inline constexpr int kMaxEvalSetNameLength = 64;

struct TrainSource {
  std::string field;      // the path's field: "data.train_path" or "data.train[1].path"
  std::string path;       // JSONL file
  v1::DataFormat format;  // the source's own, else data.format
  double weight = 1;      // > 0 once validated; 1 for the shorthand and when unset
};

struct EvalSource {
  std::string field;  // "data.eval_path" or "data.eval[0].path"
  std::string name;   // kDefaultEvalSetName for the shorthand
  std::string path;
  v1::DataFormat format;  // the set's own, else data.format
};

// data.train's sources in order, or data.train_path as one source of weight 1 (data.train
// wins when both are set, which validation refuses); empty when neither is set.
std::vector<TrainSource> TrainSourcesOf(const v1::JobSpec& spec);

// data.eval's sets in order, or data.eval_path as one set named kDefaultEvalSetName; empty
// when neither is set.
std::vector<EvalSource> EvalSetsOf(const v1::JobSpec& spec);

// Whether the job evaluates (some eval set is given).
bool HasEvalData(const v1::JobSpec& spec);

// Whether some data file has a format a tokenizer reads (anything but TOKENS).
bool DataNeedsTokenizer(const v1::JobSpec& spec);

// Every data path field of `spec` with its name, in the order above: data.train_path,
// data.eval_path, then each data.train[i].path and data.eval[i].path. The pointers stay
// valid while the spec's data lists are not resized.
std::vector<std::pair<std::string, std::string*>> MutableDataPathFields(v1::JobSpec* spec);

}  // namespace llamafleet

#endif  // LLAMAFLEET_JOBSPEC_DATA_SOURCES_H_
