#ifndef LLAMAFLEET_TESTS_TESTING_SPEC_BUILDER_H_
#define LLAMAFLEET_TESTS_TESTING_SPEC_BUILDER_H_

// Job specs for tests: a minimal valid spec, and setters for the fields tests vary.
//
//   v1::JobSpec spec = SpecBuilder("sweep-3").Queue("research").Nodes(2).Build();
//
// The base: model preset "tiny" with tokenizer /t/tokenizer.model, train data
// /d/train.jsonl, everything else unset (so it schedules on one GPU once defaults apply).

#include <string>

#include "llamafleet/v1/job.pb.h"

namespace llamafleet::testing {

class SpecBuilder {
 public:
  explicit SpecBuilder(const std::string& name = "job");

  SpecBuilder& Queue(const std::string& queue);
  SpecBuilder& Priority(int priority);
  SpecBuilder& Label(const std::string& key, const std::string& value);
  SpecBuilder& Preset(const std::string& preset);
  SpecBuilder& ModelPath(const std::string& path);  // clears the preset
  SpecBuilder& Tokenizer(const std::string& path);  // "" = none
  SpecBuilder& TrainPath(const std::string& path);
  SpecBuilder& Format(v1::DataFormat format);
  SpecBuilder& Nodes(int nodes, int gpus_per_node = 1);
  SpecBuilder& MaxRestarts(int max_restarts);
  SpecBuilder& RestartBackoffSeconds(int64_t seconds);
  SpecBuilder& CheckpointDir(const std::string& dir);
  SpecBuilder& ExportDir(const std::string& dir);
  SpecBuilder& DependsOn(const std::string& job);
  // Fields written as a YAML mapping, merged over the spec as a job document's are;
  // a YAML error fails the calling test.
  SpecBuilder& Yaml(const std::string& yaml);

  // The spec as written, as a parsed job document is before submission.
  v1::JobSpec Build() const { return spec_; }
  // With ApplyDefaults, as the coordinator stores it.
  v1::JobSpec WithDefaults() const;

 private:
  v1::JobSpec spec_;
};

}  // namespace llamafleet::testing

#endif  // LLAMAFLEET_TESTS_TESTING_SPEC_BUILDER_H_
