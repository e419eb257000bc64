#include "tests/testing/spec_builder.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <vector>

#include "jobspec/jobspec.h"

namespace llamafleet::testing {

SpecBuilder::SpecBuilder(const std::string& name) {
  spec_.set_name(name);
  spec_.mutable_model()->set_preset("tiny");
  spec_.mutable_model()->set_tokenizer("/t/tokenizer.model");
  spec_.mutable_data()->set_train_path("/d/train.jsonl");
}

SpecBuilder& SpecBuilder::Queue(const std::string& queue) {
  spec_.set_queue(queue);
  return *this;
}

SpecBuilder& SpecBuilder::Priority(int priority) {
  spec_.set_priority(priority);
  return *this;
}

SpecBuilder& SpecBuilder::Label(const std::string& key, const std::string& value) {
  (*spec_.mutable_labels())[key] = value;
  return *this;
}

SpecBuilder& SpecBuilder::Preset(const std::string& preset) {
  spec_.mutable_model()->set_preset(preset);
  return *this;
}

SpecBuilder& SpecBuilder::ModelPath(const std::string& path) {
  spec_.mutable_model()->clear_preset();
  spec_.mutable_model()->set_path(path);
  return *this;
}

SpecBuilder& SpecBuilder::Tokenizer(const std::string& path) {
  spec_.mutable_model()->set_tokenizer(path);
  return *this;
}

SpecBuilder& SpecBuilder::TrainPath(const std::string& path) {
  spec_.mutable_data()->set_train_path(path);
  return *this;
}

SpecBuilder& SpecBuilder::Format(v1::DataFormat format) {
  spec_.mutable_data()->set_format(format);
  return *this;
}

SpecBuilder& SpecBuilder::Nodes(int nodes, int gpus_per_node) {
  spec_.mutable_resources()->set_nodes(nodes);
  spec_.mutable_resources()->set_gpus_per_node(gpus_per_node);
  return *this;
}

SpecBuilder& SpecBuilder::MaxRestarts(int max_restarts) {
  spec_.mutable_run_policy()->set_max_restarts(max_restarts);
  return *this;
}

SpecBuilder& SpecBuilder::RestartBackoffSeconds(int64_t seconds) {
  spec_.mutable_run_policy()->set_restart_backoff_seconds(seconds);
  return *this;
}

SpecBuilder& SpecBuilder::CheckpointDir(const std::string& dir) {
  spec_.mutable_checkpoint()->set_dir(dir);
  return *this;
}

SpecBuilder& SpecBuilder::ExportDir(const std::string& dir) {
  spec_.mutable_output()->set_export_dir(dir);
  return *this;
}

SpecBuilder& SpecBuilder::DependsOn(const std::string& job) {
  spec_.add_depends_on()->set_job(job);
  return *this;
}

SpecBuilder& SpecBuilder::Yaml(const std::string& yaml) {
  std::vector<std::string> errors;
  try {
    MergeYamlIntoMessage(YAML::Load(yaml), "", &spec_, &errors);
  } catch (const YAML::Exception& e) {
    errors.push_back(e.what());
  }
  EXPECT_TRUE(errors.empty()) << errors[0] << "\n" << yaml;
  return *this;
}

v1::JobSpec SpecBuilder::WithDefaults() const {
  v1::JobSpec spec = spec_;
  ApplyDefaults(&spec);
  return spec;
}

}  // namespace llamafleet::testing
