// The trainer's JSON records in a job's log (worker/trainer_events.h: {"type":"metrics"},
// {"type":"eval"}, {"type":"event","event":...}) as one line of text each, the way the
// portal's log view shows them (server/portal/static/logs.js, describeRecord).
#pragma once

#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace llamafleet::cli {

// "» step 20 · loss 2.3100 · lr 0.0003 · 1,234 tok/s" for a trainer record; nullopt for any
// other line (plain text, other JSON, a record cut off mid-line), which is shown as it is.
// Missing or mistyped fields are left out rather than guessed.
std::optional<std::string> DescribeLogRecord(absl::string_view line);

// What `logs` prints for one line of a trainer's log: a record as DescribeLogRecord reads
// it, any other line as it is, and nullopt (nothing) for a metrics or stopped_early
// record: the trainer writes each of those as a line of text of its own as well
// (worker/trainer_events.h), so the record would say every step twice.
std::optional<std::string> LogTextLine(absl::string_view line);

}  // namespace llamafleet::cli
