// manifest.json of a sharded checkpoint (ParseCheckpointManifest). Properties: an
// accepted manifest's world fits its bounds and its files are plain names.
#include "checkpoint_manifest.h"
#include "fuzz_check.h"

using namespace llamafleet::trainer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<CheckpointManifest> m =
      ParseCheckpointManifest(std::string(llamafleet::fuzz::Text(data, size)), "manifest.json");
  if (!m.ok()) {
    FUZZ_CHECK(m.status().code() == absl::StatusCode::kDataLoss, "%s", m.status().ToString().c_str());
    return 0;
  }
  FUZZ_CHECK(m->world_size >= 1 && m->tensor_parallel >= 1 && m->shard_group_size >= 1 &&
                 static_cast<int64_t>(m->shard_group_size) * m->tensor_parallel <= kMaxManifestWorld,
             "world out of bounds");
  for (const CheckpointManifest::File& f : m->files) {
    FUZZ_CHECK(!f.name.empty() && f.name.find('/') == std::string::npos && f.name.find("..") == std::string::npos &&
                   f.bytes >= 0,
               "file %s", f.name.c_str());
  }
  for (const CheckpointManifest::Unit& u : m->units) FUZZ_CHECK(u.padded >= 0 && u.numel >= -1, "unit");
  return 0;
}
