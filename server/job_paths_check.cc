#include "server/job_paths_check.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/dir_fd.h"
#include "common/safe_open.h"
#include "jobspec/data_sources.h"
#include "jobspec/jobspec.h"
#include "jobspec/model_presets.h"
#include "nlohmann/json.hpp"
#include "server/path_resolution.h"
#include "server/tokenizer_vocab.h"
#include "server/user_identities.h"

namespace llamafleet {
namespace {

// The most of a model's config.json read to find max_position_embeddings.
constexpr size_t kMaxConfigBytes = 1 << 20;

// Access wanted, as the owner's mode bits.
constexpr mode_t kRead = 4, kWrite = 2, kSearch = 1;

std::optional<passwd> LookupUser(const char* name, std::string* buf) {
  struct passwd pw;
  struct passwd* found = nullptr;
  buf->resize(4096);
  if (::getpwnam_r(name, &pw, buf->data(), buf->size(), &found) != 0 || found == nullptr) {
    return std::nullopt;
  }
  return pw;
}


// "uid 0 (root)'s, mode 0755"
std::string Found(const struct stat& st) {
  return absl::StrFormat("%s's, mode %04o", UidName(st.st_uid), st.st_mode & 07777);
}

bool Allows(const struct stat& st, const JobRunAs& who, mode_t want) {
  mode_t bits = st.st_mode & 07;
  if (who.uid != JobRunAs::kNone && st.st_uid == who.uid) {
    bits = (st.st_mode >> 6) & 07;
  } else if (who.gid != JobRunAs::kNone &&
             (st.st_gid == who.gid ||
              std::find(who.groups.begin(), who.groups.end(), st.st_gid) != who.groups.end())) {
    bits = (st.st_mode >> 3) & 07;
  }
  return (bits & want) == want;
}

bool HasAcl(int fd) { return ::fgetxattr(fd, "system.posix_acl_access", nullptr, 0) > 0; }

// The same for the entry `name` of the directory `dir_fd`, not following a link.
bool HasAclAt(int dir_fd, const std::string& name) {
  const std::string path = absl::StrCat(FdPath(dir_fd), "/", name);
  return ::lgetxattr(path.c_str(), "system.posix_acl_access", nullptr, 0) > 0;
}

// One spec's checks: the refusals and notes found so far.
class Checker {
 public:
  // `made_by_parents`: the job depends on others, whose outputs its inputs may be.
  Checker(const std::vector<std::string>& roots, const std::vector<JobRunAs>& run_as,
          absl::string_view prefix, bool made_by_parents)
      : roots_(roots), run_as_(run_as), prefix_(prefix), made_by_parents_(made_by_parents) {}

  // An input the job reads: a regular file, or with `directory` a directory (its fd in
  // `dir_out`).
  void Input(absl::string_view field, const std::string& path, bool directory,
             UniqueFd* dir_out = nullptr) {
    if (path.empty()) return;
    const std::optional<std::string> resolved = ResolveBelowRoot(roots_, path);
    if (!resolved.has_value()) {
      std::optional<std::pair<std::string, std::string>> split = SplitBeneathRoot(roots_, path);
      if (split.has_value() && !OpenRootDir(split->first).ok()) {
        return Skip(field, absl::StrCat("its root ", split->first, " is not mounted here"));
      }
      return Skip(field, "it leads through a link out of its root (the workers refuse it)");
    }
    const std::string via =
        *resolved == path ? "" : absl::StrCat(" (through a link, ", *resolved, ")");
    std::optional<Walk> walk = WalkTo(field, *resolved);
    if (!walk.has_value()) return;
    if (walk->missing && made_by_parents_) {
      return Skip(field,
                  absl::StrCat(path, " does not exist yet: a job this one depends on may make it"));
    }
    if (walk->missing) {
      return Refuse(field,
                    absl::StrCat(path, via, " does not exist",
                                 walk->at == *resolved ? ""
                                                       : absl::StrCat(" (", walk->at, " has no '",
                                                                      walk->missing_name, "')")));
    }
    const struct stat& st = walk->st;
    if (directory ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)) {
      return Refuse(field, absl::StrCat(path, via, " is ", FileKind(st.st_mode), ", not ",
                                        directory ? "a directory" : "a regular file"));
    }
    if (walk->acl) return;
    if (!AnyAllows(st, directory ? kRead | kSearch : kRead)) {
      return Refuse(field, absl::StrCat(path, via, " is not readable by ", Identities(), " (",
                                        Found(st), ")"));
    }
    if (dir_out != nullptr) *dir_out = std::move(walk->fd);
  }

  // A directory the job writes: there already, or creatable by the job's identity.
  void Output(absl::string_view field, const std::string& path) {
    if (path.empty()) return;
    std::optional<Walk> walk = WalkTo(field, path);
    if (!walk.has_value()) return;
    const struct stat& st = walk->st;
    if (!S_ISDIR(st.st_mode)) {
      return Refuse(field, absl::StrCat(path, walk->missing ? absl::StrCat(": ", walk->at) : "",
                                        " is ", FileKind(st.st_mode), ", not a directory"));
    }
    if (walk->acl || AnyAllows(st, kWrite | kSearch)) return;
    if (walk->missing) {
      return Refuse(field,
                    absl::StrCat(path, " cannot be created by ", Identities(), ": ", walk->at,
                                 ", the nearest existing directory, is ", Found(st),
                                 "; make it writable by the job's identity or name a "
                                 "directory below one it owns"));
    }
    Refuse(field, absl::StrCat(path, " is not writable by ", Identities(), " (", Found(st), ")"));
  }

  void SeqLen(const v1::JobSpec& spec, const v1::JobSpec& submitted, int model_fd) {
    if (!submitted.training().has_seq_len()) return;  // the default is capped to the model's
    const std::string shown =
        absl::StrCat(prefix_, "model.path: ", spec.model().path(), "/config.json");
    absl::StatusOr<std::string> text =
        ReadRegularFile(model_fd, "config.json", kMaxConfigBytes, shown);
    if (!text.ok()) {
      // Missing or of the wrong kind: FileIn refused it. A link: the workers follow it.
      return Skip("training.seq_len",
                  absl::StrCat("config.json could not be read here: ", text.status().message()));
    }
    const nlohmann::json config = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (config.is_discarded() || !config.is_object()) {
      return Refuse("model.path",
                    absl::StrCat(spec.model().path(), "/config.json is not a JSON object"));
    }
    const auto it = config.find("max_position_embeddings");
    if (it == config.end() || !it->is_number_integer()) return;  // the trainer names it
    const int64_t limit = it->get<int64_t>();
    const int64_t seq_len = spec.training().seq_len();
    if (seq_len <= limit) return;
    const std::string rule = absl::StrCat("must be <= ", limit, ", max_position_embeddings in ",
                                          spec.model().path(), "/config.json (got ", seq_len, ")");
    seq_len_errors_.push_back(absl::StrCat(prefix_, "training.seq_len ", rule));
    v1::FieldViolation v;
    v.set_field(absl::StrCat(prefix_, "training.seq_len"));
    v.set_description(rule);
    seq_len_violations_.push_back(std::move(v));
  }

  // A file inside a directory checked by Input (its descriptor).
  void FileIn(absl::string_view field, int dir_fd, const std::string& dir,
              const std::string& name) {
    struct stat st;
    if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) return Refuse(field, absl::StrCat(dir, " has no ", name));
      return Skip(field, absl::StrCat(dir, "/", name, " cannot be looked at here"));
    }
    if (S_ISLNK(st.st_mode)) {
      return Skip(field, absl::StrCat(dir, "/", name,
                                      " is a symbolic link (the workers check where it leads)"));
    }
    if (!S_ISREG(st.st_mode)) {
      return Refuse(field, absl::StrCat(dir, "/", name, " is ", FileKind(st.st_mode),
                                        ", not a regular file"));
    }
    if (!HasAclAt(dir_fd, name) && !AnyAllows(st, kRead)) {
      return Refuse(field, absl::StrCat(dir, "/", name, " is not readable by ", Identities(), " (",
                                        Found(st), ")"));
    }
  }

  // A path that was not looked at, and why.
  void Skip(absl::string_view field, const std::string& why) {
    notes_.push_back(absl::StrCat(prefix_, field, " not checked: ", why));
  }

  bool refused() const { return !errors_.empty(); }

  JobPathsVerdict Verdict() && {
    JobPathsVerdict out;
    out.notes = std::move(notes_);
    if (!seq_len_errors_.empty() && errors_.empty()) {
      out.status = WithFieldViolations(
          absl::InvalidArgumentError(absl::StrJoin(seq_len_errors_, "; ")), seq_len_violations_);
      return out;
    }
    for (std::string& e : seq_len_errors_) errors_.push_back(std::move(e));
    for (v1::FieldViolation& v : seq_len_violations_) violations_.push_back(std::move(v));
    if (!errors_.empty()) {
      out.status = WithFieldViolations(absl::FailedPreconditionError(absl::StrJoin(errors_, "; ")),
                                       violations_);
    }
    return out;
  }

 private:
  // Where a walk down a path ended: the entry itself (`missing` false), or the nearest
  // existing directory `at` when a component (`missing_name`) is missing. `fd`: the
  // directory's descriptor when the walk ended on one.
  struct Walk {
    bool missing = false;
    std::string at;
    std::string missing_name;
    struct stat st {};
    bool acl = false;
    UniqueFd fd;
  };

  // Goes down `path` from its root, no link followed; nullopt (with a note, or a refusal)
  // where it cannot.
  std::optional<Walk> WalkTo(absl::string_view field, const std::string& path) {
    std::optional<std::pair<std::string, std::string>> split = SplitBeneathRoot(roots_, path);
    if (!split.has_value()) {
      Skip(field, "it is in no path root");
      return std::nullopt;
    }
    absl::StatusOr<UniqueFd> root = OpenRootDir(split->first);
    if (!root.ok()) {
      Skip(field, absl::StrCat("its root ", split->first, " is not mounted here"));
      return std::nullopt;
    }
    Walk w;
    w.at = split->first;
    w.fd = *std::move(root);
    if (::fstat(w.fd.get(), &w.st) != 0) {
      Skip(field, absl::StrCat(w.at, " cannot be looked at here"));
      return std::nullopt;
    }
    const std::vector<std::string> parts = absl::StrSplit(split->second, '/', absl::SkipEmpty());
    for (size_t i = 0; i < parts.size(); ++i) {
      if (!w.acl) w.acl = HasAcl(w.fd.get());
      if (!w.acl && !AnyAllows(w.st, kSearch)) {
        Refuse(field, absl::StrCat(path, " cannot be reached by ", Identities(), ": ", w.at, " is ",
                                   Found(w.st)));
        return std::nullopt;
      }
      struct stat st;
      if (::fstatat(w.fd.get(), parts[i].c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno != ENOENT) {
          Skip(field, absl::StrCat(w.at, " cannot be listed here"));
          return std::nullopt;
        }
        w.missing = true;
        w.missing_name = parts[i];
        w.acl = HasAcl(w.fd.get());
        return w;
      }
      const std::string next = absl::StrCat(w.at == "/" ? "" : w.at, "/", parts[i]);
      if (S_ISLNK(st.st_mode)) {
        Skip(field, absl::StrCat(next, " is a symbolic link"));
        return std::nullopt;
      }
      if (!S_ISDIR(st.st_mode)) {
        if (i + 1 < parts.size()) {
          // A file on the way: nothing below it can exist or be made.
          w.missing = true;
          w.missing_name = parts[i + 1];
        }
        w.acl = HasAclAt(w.fd.get(), parts[i]);
        w.at = next;
        w.st = st;
        w.fd = UniqueFd();
        if (i + 1 < parts.size()) return w;
        break;
      }
      const int fd =
          ::openat(w.fd.get(), parts[i].c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (fd < 0) {
        Skip(field, absl::StrCat(next, " cannot be opened here"));
        return std::nullopt;
      }
      w.fd = UniqueFd(fd);
      w.at = next;
      if (::fstat(fd, &w.st) != 0) {
        Skip(field, absl::StrCat(next, " cannot be looked at here"));
        return std::nullopt;
      }
      w.acl = false;
    }
    if (w.fd.valid() && !w.acl) w.acl = HasAcl(w.fd.get());
    return w;
  }

  bool AnyAllows(const struct stat& st, mode_t want) const {
    if (run_as_.empty()) return true;  // nothing says who runs the job
    return std::any_of(run_as_.begin(), run_as_.end(),
                       [&](const JobRunAs& who) { return Allows(st, who, want); });
  }

  std::string Identities() const {
    std::vector<std::string> shown;
    for (const JobRunAs& who : run_as_) shown.push_back(who.shown);
    return absl::StrCat("the job's identity (", absl::StrJoin(shown, ", or "), ")");
  }

  void Refuse(absl::string_view field, const std::string& why) {
    errors_.push_back(absl::StrCat(prefix_, field, " ", why));
    v1::FieldViolation v;
    v.set_field(absl::StrCat(prefix_, field));
    v.set_description(why);
    violations_.push_back(std::move(v));
  }

  const std::vector<std::string>& roots_;
  const std::vector<JobRunAs>& run_as_;
  const std::string prefix_;
  const bool made_by_parents_;
  std::vector<std::string> errors_, seq_len_errors_, notes_;
  std::vector<v1::FieldViolation> violations_, seq_len_violations_;
};

// For a preset sized by its tokenizer (model_presets.h), the tokenizer's vocabulary and a
// note naming the vocabulary the estimates count.
void ReadPresetVocab(const std::vector<std::string>& roots, absl::string_view prefix,
                     const v1::JobSpec& spec, JobPathsVerdict* verdict) {
  const sched::ModelPreset* preset = sched::FindModelPreset(spec.model().preset());
  if (preset == nullptr || !preset->takes_tokenizer_vocab || !spec.model().path().empty() ||
      !DataNeedsTokenizer(spec) || spec.model().tokenizer().empty()) {
    return;
  }
  absl::StatusOr<int64_t> vocab = ReadTokenizerVocabSize(roots, spec.model().tokenizer());
  if (vocab.ok()) {
    verdict->tokenizer_vocab = *vocab;
    verdict->notes.push_back(absl::StrCat("the estimates count ", prefix,
                                          "model.tokenizer's vocabulary of ", *vocab, " pieces"));
  } else {
    verdict->notes.push_back(
        absl::StrCat("the estimates count ", prefix, "model.preset's vocabulary of ", preset->vocab,
                     " pieces, as ", prefix,
                     "model.tokenizer could not be read here: ", vocab.status().message()));
  }
}

}  // namespace

std::vector<JobRunAs> JobRunIdentities(const UserIdentities* identities, const std::string& user) {
  std::vector<JobRunAs> out;
  if (identities != nullptr) {
    if (std::optional<v1::RunIdentity> id = identities->Find(user)) {
      JobRunAs who;
      who.uid = id->uid();
      who.gid = id->gid();
      who.groups.assign(id->groups().begin(), id->groups().end());
      who.shown = absl::StrCat("uid ", id->uid(), ", ", user, "'s job identity");
      out.push_back(std::move(who));
    } else {
      JobRunAs fresh;  // a dynamic uid given at the first submission: it owns nothing
      fresh.shown = absl::StrCat("a new dynamic uid for ", user);
      out.push_back(std::move(fresh));
    }
  }
  std::string buf;
  if (std::optional<passwd> pw = LookupUser("llamafleet", &buf)) {
    JobRunAs who;
    who.uid = pw->pw_uid;
    who.gid = pw->pw_gid;
    who.shown = absl::StrCat("uid ", pw->pw_uid, " (llamafleet)");
    out.push_back(std::move(who));
  }
  if (const uid_t self = ::geteuid(); self != 0) {
    JobRunAs who;
    who.uid = self;
    who.gid = ::getegid();
    const int n = ::getgroups(0, nullptr);
    if (n > 0) {
      std::vector<gid_t> groups(static_cast<size_t>(n));
      if (::getgroups(n, groups.data()) == n) who.groups = std::move(groups);
    }
    who.shown = UidName(self);
    out.push_back(std::move(who));
  }
  return out;
}

JobPathsVerdict CheckJobPaths(const std::vector<std::string>& roots,
                              const std::vector<JobRunAs>& run_as, absl::string_view prefix,
                              const v1::JobSpec& spec, const v1::JobSpec& submitted) {
  Checker check(roots, run_as, prefix, spec.depends_on_size() > 0);
  for (const TrainSource& s : TrainSourcesOf(spec)) check.Input(s.field, s.path, false);
  for (const EvalSource& s : EvalSetsOf(spec)) check.Input(s.field, s.path, false);
  const v1::ModelSpec& model = spec.model();
  UniqueFd model_dir;
  check.Input("model.path", model.path(), true, &model_dir);
  if (model_dir.valid()) {
    check.FileIn("model.path", model_dir.get(), model.path(), "config.json");
    if (model.tokenizer().empty() && DataNeedsTokenizer(spec)) {
      // The trainer takes tokenizer.model when the directory has one, else tokenizer.json.
      struct stat st;
      const bool json = ::fstatat(model_dir.get(), "tokenizer.model", &st, AT_SYMLINK_NOFOLLOW) != 0 &&
                        ::fstatat(model_dir.get(), "tokenizer.json", &st, AT_SYMLINK_NOFOLLOW) == 0;
      check.FileIn("model.tokenizer", model_dir.get(), model.path(),
                   json ? "tokenizer.json" : "tokenizer.model");
    }
    const std::string& chat_template = spec.data().chat_template();
    if (model.tokenizer().empty() && spec.data().format() == v1::CHAT &&
        (chat_template.empty() || chat_template == "model")) {
      // The model's own template: chat_template.jinja when present, else tokenizer_config.json.
      struct stat st;
      const bool jinja =
          ::fstatat(model_dir.get(), "chat_template.jinja", &st, AT_SYMLINK_NOFOLLOW) == 0;
      check.FileIn("data.chat_template", model_dir.get(), model.path(),
                   jinja ? "chat_template.jinja" : "tokenizer_config.json");
    }
    if (!check.refused()) check.SeqLen(spec, submitted, model_dir.get());
  }
  check.Input("model.tokenizer", model.tokenizer(), false);
  check.Output("checkpoint.dir", spec.checkpoint().dir());
  check.Output("output.export_dir", spec.output().export_dir());
  if (run_as.empty()) {
    check.Skip("access", "no job identity is configured and the coordinator runs as root");
  }
  const bool refused = check.refused();
  JobPathsVerdict verdict = std::move(check).Verdict();
  if (!refused) ReadPresetVocab(roots, prefix, spec, &verdict);
  return verdict;
}

}  // namespace llamafleet
