#ifndef LLAMAFLEET_SERVER_JOB_PATHS_CHECK_H_
#define LLAMAFLEET_SERVER_JOB_PATHS_CHECK_H_

// What the storage says of a job's paths, checked at submission (and in a dry run) so that a
// mistake costs a refusal rather than a scheduled job, where the coordinator sees the
// storage (its path roots are mounted here):
//   - inputs (data.train_path, data.eval_path, model.path with its config.json, the
//     tokenizer: model.tokenizer, else <model.path>/tokenizer.model or, without one,
//     tokenizer.json, unless data.format is TOKENS; for CHAT data with the model's own
//     template, its chat_template.jinja or tokenizer_config.json) exist, are what they must be (a
//     regular file; model.path a directory), and the
//     job's identity may read them; a job with depends_on may name inputs its parents have
//     yet to make (a note says so);
//   - outputs (checkpoint.dir, output.export_dir) are directories, or can be made by the
//     job's identity: the nearest existing directory on the way is writable by it;
//   - every directory on the way is searchable by the job's identity;
//   - training.seq_len as written is at most model.path's max_position_embeddings
//     (config.json, read bounded);
//   - for a preset that takes its tokenizer's vocabulary, model.tokenizer's size is read
//     (bounded, never refused here: the trainer judges the file) for the estimates.
// The job's identity is any of the identities its trainers may run as (JobRunIdentities);
// a path passes when one of them may use it. Access is judged on the owner, group and other
// mode bits; an entry with a POSIX ACL is not judged (its bits do not tell).
//
// Paths are looked up from a descriptor of their path root, one component at a time, never
// following a link (common/dir_fd.h); an input is first resolved the way the storage
// resolves it inside its root (path_resolution.h), as the workers read inputs through
// links inside the roots. Nothing is refused where the coordinator cannot look (the root is
// not mounted here, a directory on the way is closed to the coordinator's user, a link
// leads out of the root: the workers refuse that one); each such skip is reported as a note.
//
// These calls touch the storage: run them off the gRPC callback threads (the job service
// runs them on its submission thread).

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "llamafleet/v1/job.pb.h"

namespace llamafleet {

class UserIdentities;

// One identity a job's trainers may run as.
struct JobRunAs {
  static constexpr uid_t kNone = static_cast<uid_t>(-1);
  uid_t uid = kNone;  // kNone: a dynamic uid not given yet (owns nothing)
  gid_t gid = kNone;
  std::vector<gid_t> groups;  // supplementary groups, where known
  std::string shown;          // for messages: "uid 61000 (alice's job identity)"
};

// The identities `user`'s jobs may run as: their job identity (user_identities.h; a new
// dynamic one when they have none yet and `identities` is set), `llamafleet` where this host
// knows that user (workers with --run-as), and this process's user unless it is root
// (workers that are not root run jobs as themselves: the local mode). Empty when
// `identities` is null and this process is root: nothing says who runs the job.
std::vector<JobRunAs> JobRunIdentities(const UserIdentities* identities, const std::string& user);

// The result of CheckJobPaths: the refusal, if any, and what could not be checked.
struct JobPathsVerdict {
  // FAILED_PRECONDITION naming each field (`prefix` + field) and path that is missing, of
  // the wrong kind or closed to the job's identity, with what was found; INVALID_ARGUMENT
  // for a training.seq_len over the model's limit, naming the value and the limit. Several
  // problems are joined with "; ", each a FieldViolation.
  absl::Status status;
  // "data.train_path not checked: ..." for each path that was not looked at, and why;
  // and which vocabulary the estimates count for a preset that takes its tokenizer's.
  std::vector<std::string> notes;
  // That preset's vocabulary, read from model.tokenizer (server/tokenizer_vocab.h); 0 when
  // the job has no such preset or the tokenizer could not be read here.
  int64_t tokenizer_vocab = 0;
};

// Checks `spec` (defaults applied; `submitted`: the spec as written, for what it set
// itself) as above. `roots`: the coordinator's normalized path roots; `run_as`:
// JobRunIdentities of the job's owner (empty: access is not judged, and a note says so).
JobPathsVerdict CheckJobPaths(const std::vector<std::string>& roots,
                              const std::vector<JobRunAs>& run_as, absl::string_view prefix,
                              const v1::JobSpec& spec, const v1::JobSpec& submitted);

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_JOB_PATHS_CHECK_H_
