// Messages as the text users read and write: JSON and block YAML with proto field names.

#include <string>

#include "clients/jobspec/jobspec.h"
#include "google/protobuf/message.h"
#include "google/protobuf/util/json_util.h"
#include "yaml-cpp/yaml.h"

namespace llamafleet {
namespace {

void SetBlockStyle(YAML::Node node) {
  if (node.IsMap() || node.IsSequence()) {
    node.SetStyle(YAML::EmitterStyle::Block);
    for (auto it = node.begin(); it != node.end(); ++it) {
      SetBlockStyle(node.IsMap() ? it->second : *it);
    }
  }
}

}  // namespace

// The JSON printer writes exactly the fields the message has (without
// always_print_primitive_fields): an `optional` field set to zero is written, an unset one
// is not. MessageToYaml relies on this for presence.
std::string MessageToJson(const google::protobuf::Message& message, bool pretty) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.add_whitespace = pretty;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(message, &out, options);
  return out;
}

// JSON is YAML: the printer's output, restyled as block YAML, is what ParseJobDocuments
// reads back into the same message.
std::string MessageToYaml(const google::protobuf::Message& message) {
  YAML::Node node = YAML::Load(MessageToJson(message));
  SetBlockStyle(node);
  YAML::Emitter out;
  out << node;
  return std::string(out.c_str()) + "\n";
}

}  // namespace llamafleet
