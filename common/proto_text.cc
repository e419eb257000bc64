// Messages as the text users read and write: JSON and block YAML with proto field names.

#include <string>

#include "common/proto_text.h"
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

std::string MessageToJson(const google::protobuf::Message& message, bool pretty) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  options.add_whitespace = pretty;
  std::string out;
  if (!google::protobuf::util::MessageToJsonString(message, &out, options).ok()) return "{}";
  return out;
}

// The JSON printer without always_print_primitive_fields writes exactly the fields the
// message has: an `optional` field set to zero is written, an unset one is not.
std::string MessageToJsonWithPresence(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(message, &out, options);
  return out;
}

// JSON is YAML: the presence-keeping print, restyled as block YAML, is what
// ParseJobDocuments reads back into the same message.
std::string MessageToYaml(const google::protobuf::Message& message) {
  YAML::Node node = YAML::Load(MessageToJsonWithPresence(message));
  SetBlockStyle(node);
  YAML::Emitter out;
  out << node;
  return std::string(out.c_str()) + "\n";
}

}  // namespace llamafleet
