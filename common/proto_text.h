#ifndef LLAMAFLEET_COMMON_PROTO_TEXT_H_
#define LLAMAFLEET_COMMON_PROTO_TEXT_H_

// Messages as the text users and scripts read and write. Every component that prints a
// message (the CLI, the HTTP gateway, the worker) goes through these, so a field reads the
// same everywhere: proto field names, enum names.

#include <string>

#include "google/protobuf/message.h"

namespace llamafleet {

// Renders a message as block YAML. Field presence is kept: every set field is written,
// explicit zeros of `optional` fields included (seed: 0, max_restarts: 0), and nothing
// unset is, so parsing the text gives the message back.
std::string MessageToYaml(const google::protobuf::Message& message);

// Renders a message as JSON for programs: every field is printed, defaults included, so a
// script never has to know which zero was omitted. One line unless `pretty`.
std::string MessageToJson(const google::protobuf::Message& message, bool pretty = false);

// Renders a message as one line of JSON with field presence kept, as MessageToYaml does:
// what a program that parses the message back (the trainer's spec.json) must be given.
std::string MessageToJsonWithPresence(const google::protobuf::Message& message);

}  // namespace llamafleet

#endif  // LLAMAFLEET_COMMON_PROTO_TEXT_H_
