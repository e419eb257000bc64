// model.safetensors.index.json of a sharded HF model. Property: every file an accepted
// index names is a plain name in the model's directory.
#include "fuzz_check.h"
#include "safetensors.h"

using namespace llamafleet::trainer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<std::map<std::string, std::string>> index =
      ParseSafetensorsIndex(std::string(llamafleet::fuzz::Text(data, size)), "model.safetensors.index.json");
  if (!index.ok()) return 0;
  for (const auto& [tensor, file] : *index) {
    FUZZ_CHECK(!file.empty() && file.find('/') == std::string::npos && file != "." && file != "..",
               "file \"%s\" is not a plain name", file.c_str());
  }
  return 0;
}
