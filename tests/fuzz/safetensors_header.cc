// safetensors files as the trainer opens them (SafetensorsFile::Open: the 8-byte header
// length, the JSON header, the data buffer), from an in-memory file. Properties: every
// tensor accepted lies inside the data buffer and its size is numel x dtype size.
#include "fuzz_check.h"
#include "safetensors.h"

using namespace llamafleet::trainer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file =
      SafetensorsFile::Open(llamafleet::fuzz::InMemoryFile(data, size));
  if (!file.ok()) return 0;
  uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = header << 8 | data[i];
  const uint64_t buffer = size - 8 - header;
  for (const auto& [name, info] : (*file)->tensors()) {
    FUZZ_CHECK(info.begin <= info.end && info.end <= buffer, "%s outside the buffer", name.c_str());
    FUZZ_CHECK(static_cast<uint64_t>(info.numel()) * StDtypeSize(info.dtype) == info.end - info.begin,
               "%s: size is not numel x dtype size", name.c_str());
    const uint8_t* bytes = (*file)->Data(info);
    if (info.end > info.begin) FUZZ_CHECK(bytes[info.end - info.begin - 1] == data[8 + header + info.end - 1], "data");
  }
  return 0;
}
