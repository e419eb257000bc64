// The trainer's stdout lines as the worker agent reads them (ParseLine), and the resume
// candidates file as the trainer reads it (ParseCandidates). Property: an event read from
// a line, written again (ToLine), reads back as the same kind of event.
#include "fuzz_check.h"
#include "worker/trainer_events.h"

using namespace llamafleet;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = fuzz::Text(data, size);
  std::optional<trainer_events::Event> event = trainer_events::ParseLine(text);
  if (event.has_value()) {
    const std::string line = std::visit([](const auto& e) { return trainer_events::ToLine(e); }, *event);
    std::optional<trainer_events::Event> again = trainer_events::ParseLine(line);
    FUZZ_CHECK(again.has_value() && again->index() == event->index(), "event written back reads differently: %s",
               line.c_str());
  }
  absl::StatusOr<std::vector<trainer_events::ResumeCandidate>> candidates = trainer_events::ParseCandidates(text);
  if (candidates.ok()) {
    const std::string json = trainer_events::CandidatesToJson(*candidates);
    absl::StatusOr<std::vector<trainer_events::ResumeCandidate>> again = trainer_events::ParseCandidates(json);
    FUZZ_CHECK(again.ok() && again->size() == candidates->size(), "candidates written back read differently: %s",
               json.c_str());
  }
  return 0;
}
