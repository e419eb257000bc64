// `logs ID`: a job's trainer output, per rank, optionally followed.
#include <algorithm>
#include <map>
#include <optional>
#include <ostream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "clients/cli/command.h"
#include "clients/cli/interrupt.h"
#include "clients/cli/log_record.h"
#include "clients/cli/output.h"
#include "common/status_macros.h"

namespace llamafleet::cli {
namespace {

// The most lines a request's tail_lines may ask for; past it, the whole log.
constexpr int64_t kMaxTailLines = int64_t{1} << 30;

// The chunks of the text view of `--tail N` without -f: the server counts every line of a
// rank's log, while the view leaves out the records the trainer also writes as text
// (LogTextLine), so it asks for more lines (2N + 1, then twice as many) until each rank
// has N lines to show or its whole log was sent. `shown` gets each rank's lines to show.
absl::StatusOr<std::vector<v1::LogChunk>> FetchTail(Client& client,
                                                    v1::StreamJobLogsRequest request, int64_t tail,
                                                    absl::Time deadline,
                                                    std::map<int32_t, int64_t>* shown) {
  for (int64_t want = 2 * tail + 1;; want *= 2) {
    const bool whole = want > kMaxTailLines;
    request.set_tail_lines(whole ? 0 : static_cast<int32_t>(want));
    std::vector<v1::LogChunk> chunks;
    std::map<int32_t, int64_t> raw;
    shown->clear();
    LF_RETURN_IF_ERROR(client.StreamJobLogs(
        request,
        [&](const v1::LogChunk& chunk) {
          raw[chunk.rank()] += chunk.lines_size();
          for (const std::string& line : chunk.lines())
            (*shown)[chunk.rank()] += LogTextLine(line).has_value();
          chunks.push_back(chunk);
          return absl::OkStatus();
        },
        deadline));
    const bool enough = std::all_of(raw.begin(), raw.end(), [&](const auto& r) {
      return r.second < want || (*shown)[r.first] >= tail;
    });
    if (whole || enough) return chunks;
  }
}

}  // namespace

absl::Status RunLogs(const Context& ctx, const std::string& id, const LogsFlags& flags,
                     bool rank_given) {
  if (rank_given && flags.rank < 0) return UsageError("--rank must be >= 0");
  if (flags.attempt < 0) return UsageError("--attempt must be >= 1 (or 0 for the newest)");
  if (flags.tail < 0) return UsageError("--tail must be >= 0");
  LF_ASSIGN_OR_RETURN(Client* client, Connect(ctx));
  LF_ASSIGN_OR_RETURN(v1::Job job, client->GetJob(id));
  const v1::ResourceSpec& resources = job.spec().resources();
  const int64_t world = static_cast<int64_t>(std::max(resources.nodes(), resources.max_nodes())) *
                        std::max(resources.gpus_per_node(), 1);
  if (flags.rank >= world) {
    return absl::InvalidArgumentError(absl::StrCat("job ", id, " has ranks 0..", world - 1,
                                                   "; --rank ", flags.rank, " is not one of them"));
  }
  if (flags.attempt > job.attempts()) {
    return absl::InvalidArgumentError(absl::StrCat("job ", id, " has no attempt ", flags.attempt,
                                                   " (attempts so far: ", job.attempts(), ")"));
  }
  // Several ranks interleave by chunk; each line says whose it is.
  const bool prefix = flags.rank < 0 && world > 1;

  v1::StreamJobLogsRequest request;
  request.set_job_id(id);
  request.set_attempt(flags.attempt);
  request.set_rank(flags.rank);
  request.set_follow(flags.follow);
  request.set_tail_lines(flags.tail);
  int64_t lines = 0;
  auto print = [&](const v1::LogChunk& chunk) {
    if (ctx.format == Format::kJson) {
      *ctx.out << ToJson(chunk, /*pretty=*/false);
    } else if (ctx.format == Format::kYaml) {
      *ctx.out << "---\n" << ToYaml(chunk);
    } else {
      for (const std::string& line : chunk.lines()) {
        const std::optional<std::string> text = flags.raw ? line : LogTextLine(line);
        if (!text.has_value()) continue;
        if (prefix) *ctx.out << "[rank " << chunk.rank() << "] ";
        *ctx.out << *text << "\n";
      }
    }
    lines += chunk.lines_size();
    ctx.out->flush();
    return absl::OkStatus();
  };
  absl::Status status;
  if (flags.tail > 0 && !flags.follow && !flags.raw && ctx.format != Format::kJson &&
      ctx.format != Format::kYaml) {
    std::map<int32_t, int64_t> shown;
    LF_ASSIGN_OR_RETURN(
        std::vector<v1::LogChunk> chunks,
        FetchTail(*client, request, flags.tail, absl::Now() + ctx.client_options.timeout, &shown));
    // Each rank's first lines past its last `tail` to show are left out.
    std::map<int32_t, int64_t> skip;
    for (const auto& [rank, n] : shown) skip[rank] = std::max<int64_t>(0, n - flags.tail);
    for (v1::LogChunk& chunk : chunks) {
      v1::LogChunk kept = chunk;
      kept.clear_lines();
      for (std::string& line : *chunk.mutable_lines()) {
        if (LogTextLine(line).has_value() && skip[chunk.rank()] > 0) {
          --skip[chunk.rank()];
          continue;
        }
        kept.add_lines(std::move(line));
      }
      LF_RETURN_IF_ERROR(print(kept));
    }
  } else if (flags.follow) {
    InterruptWatcher interrupt([&] { client->CancelStreams(); });
    status = client->StreamJobLogs(request, print);
    if (interrupt.signal() != 0) return Interrupted(interrupt.signal());
  } else {
    status = client->StreamJobLogs(request, print, absl::Now() + ctx.client_options.timeout);
  }
  if (!status.ok()) return status;
  if (lines == 0 && !flags.follow && job.attempts() == 0) {
    // A note, not an error: stdout stays empty, as the log is.
    *ctx.err << "llamafleet: job " << id << " has not started yet (" << StateName(job.state())
             << "); use -f to wait for its logs\n";
  }
  return absl::OkStatus();
}

}  // namespace llamafleet::cli
