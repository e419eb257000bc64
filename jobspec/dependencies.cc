#include "jobspec/dependencies.h"

#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/job_state.h"
#include "jobspec/data_sources.h"
#include "jobspec/field_violations.h"
#include "jobspec/jobspec.h"

namespace llamafleet {
namespace {

using jobspec_internal::Violations;

constexpr char kOpen[] = "{{";
constexpr char kClose[] = "}}";

// A job id as depends_on writes it: decimal digits only, no sign, no leading zero.
std::optional<int64_t> AsJobId(const std::string& text) {
  if (text.empty() || text.size() > 18 || text[0] == '0') return std::nullopt;
  for (char c : text) {
    if (!absl::ascii_isdigit(c)) return std::nullopt;
  }
  int64_t id = 0;
  if (!absl::SimpleAtoi(text, &id)) return std::nullopt;
  return id;
}

// The path fields a job reads, where templates may stand; the ones it writes may not
// hold one (two jobs never share a written directory).
std::vector<std::pair<std::string, std::string*>> ReadFields(v1::JobSpec* spec) {
  std::vector<std::pair<std::string, std::string*>> out = {
      {"model.path", spec->mutable_model()->mutable_path()},
      {"model.tokenizer", spec->mutable_model()->mutable_tokenizer()},
  };
  for (auto& field : MutableDataPathFields(spec)) out.push_back(std::move(field));
  out.push_back({"checkpoint.resume", spec->mutable_checkpoint()->mutable_resume()});
  // Only a spec with a peft block has an adapter path: asking would add an empty block.
  if (spec->has_peft())
    out.push_back({"peft.adapter_path", spec->mutable_peft()->mutable_adapter_path()});
  return out;
}

// What one batch entry's references resolve to.
struct Target {
  int batch_index = -1;          // >= 0: an entry of this batch
  std::optional<int64_t> id;     // an existing job
  std::string export_dir;
};

class Resolver {
 public:
  Resolver(std::vector<BatchEntry>& batch, const std::string& user, bool admin,
           const ParentLookup& lookup)
      : batch_(batch), user_(user), admin_(admin), lookup_(lookup) {
    for (size_t i = 0; i < batch.size(); ++i) by_name_[batch[i].spec->name()].push_back(static_cast<int>(i));
  }

  absl::Status Run() {
    std::vector<v1::FieldViolation> violations;
    std::vector<std::string> errors;
    absl::Status denied;
    for (size_t i = 0; i < batch_.size(); ++i) {
      Violations v(batch_[i].field_prefix);
      absl::Status s = ResolveEntry(static_cast<int>(i), v);
      if (!s.ok() && s.code() != absl::StatusCode::kInvalidArgument) {
        if (denied.ok()) denied = s;
        continue;
      }
      if (absl::Status st = v.ToStatus(); !st.ok()) {
        errors.emplace_back(st.message());
        for (v1::FieldViolation& f : FieldViolationsOf(st)) violations.push_back(std::move(f));
      }
    }
    if (!errors.empty()) {
      return WithFieldViolations(absl::InvalidArgumentError(absl::StrJoin(errors, "; ")), violations);
    }
    return denied;
  }

 private:
  // Resolves `ref` as written in entry `self`'s `field`; nullopt (with a violation) when
  // it cannot be. A non-INVALID_ARGUMENT error (permission, store) goes to `*error`.
  std::optional<Target> Find(int self, const std::string& ref, const std::string& field, Violations& v,
                             absl::Status* error) {
    if (std::optional<int64_t> id = AsJobId(ref)) {
      absl::StatusOr<ParentJob> parent = lookup_(*id);
      if (parent.status().code() == absl::StatusCode::kNotFound) {
        v.Add(field, absl::StrCat("names job ", *id, ", which does not exist"));
        return std::nullopt;
      }
      if (!parent.ok()) {
        *error = parent.status();
        return std::nullopt;
      }
      if (!admin_ && parent->owner != user_) {
        *error = WithFieldViolations(
            absl::PermissionDeniedError(absl::StrCat(batch_[self].field_prefix, field, ": job ", *id,
                                                     " is owned by ", parent->owner,
                                                     "; only its owner or an admin may depend on it (user ",
                                                     user_, ")")),
            {});
        return std::nullopt;
      }
      Target t;
      t.id = *id;
      t.export_dir = parent->export_dir;
      return t;
    }
    auto it = by_name_.find(ref);
    if (it == by_name_.end()) {
      v.Add(field, absl::StrCat("names \"", ref, "\", which is neither a job id nor the name of a job in this batch"));
      return std::nullopt;
    }
    if (it->second.size() > 1) {
      std::vector<std::string> where;
      for (int j : it->second) where.push_back(absl::StrCat("jobs[", j, "]"));
      v.Add(field, absl::StrCat("names \"", ref, "\", which ", it->second.size(), " jobs of this batch are called (",
                                absl::StrJoin(where, ", "), "); give them distinct names"));
      return std::nullopt;
    }
    const int b = it->second[0];
    if (b == self) {
      v.Add(field, "names this job itself; a job cannot depend on itself");
      return std::nullopt;
    }
    if (b > self) {
      std::vector<int> cycle;
      if (PathBack(b, self, &cycle)) {
        std::vector<std::string> names = {batch_[self].spec->name()};
        for (int j : cycle) names.push_back(batch_[j].spec->name());
        v.Add(field, absl::StrCat("forms a cycle: ", absl::StrJoin(names, " -> "),
                                  "; dependencies must form a chain or a tree"));
      } else {
        v.Add(field, absl::StrCat("names \"", ref, "\", which comes later in this batch (jobs[", b,
                                  "]); list a job after the jobs it depends on"));
      }
      return std::nullopt;
    }
    Target t;
    t.batch_index = b;
    t.export_dir = batch_[b].spec->output().export_dir();
    return t;
  }

  // Whether entry `from` depends, through batch names, on entry `to` (the path from
  // `from` to `to`, `to` last, in `*path`).
  bool PathBack(int from, int to, std::vector<int>* path) {
    std::set<int> seen;
    return Dfs(from, to, &seen, path);
  }
  bool Dfs(int at, int to, std::set<int>* seen, std::vector<int>* path) {
    if (!seen->insert(at).second) return false;
    path->push_back(at);
    if (at == to) return true;
    for (const v1::JobDependency& d : batch_[at].spec->depends_on()) {
      auto it = by_name_.find(d.job());
      if (it == by_name_.end() || it->second.size() != 1) continue;
      if (Dfs(it->second[0], to, seen, path)) return true;
    }
    path->pop_back();
    return false;
  }

  absl::Status ResolveEntry(int self, Violations& v) {
    BatchEntry& entry = batch_[self];
    v1::JobSpec* spec = entry.spec;
    entry.batch_parents.clear();
    absl::Status error;
    // depends_on: the parents, each once.
    std::set<std::string> parents;  // "#b" for batch entries, "id" for jobs
    for (int k = 0; k < spec->depends_on_size(); ++k) {
      const std::string field = absl::StrCat("depends_on[", k, "].job");
      const std::string ref = spec->depends_on(k).job();
      std::optional<Target> t = Find(self, ref, field, v, &error);
      if (!error.ok()) return error;
      if (!t.has_value()) continue;
      const std::string key = t->id ? absl::StrCat(*t->id) : absl::StrCat("#", t->batch_index);
      if (!parents.insert(key).second) {
        v.Add(field, absl::StrCat("names \"", ref, "\" a second time"));
        continue;
      }
      if (t->batch_index >= 0) entry.batch_parents.emplace_back(k, t->batch_index);
    }
    // Templates in the fields the job reads.
    for (auto& [field, value] : ReadFields(spec)) {
      std::string out;
      absl::string_view rest = *value;
      bool changed = false;
      while (true) {
        const size_t open = rest.find(kOpen);
        if (open == absl::string_view::npos) break;
        const size_t close = rest.find(kClose, open);
        if (close == absl::string_view::npos) {
          v.Add(field, "has \"{{\" without a closing \"}}\"");
          break;
        }
        absl::string_view expr = absl::StripAsciiWhitespace(rest.substr(open + 2, close - open - 2));
        absl::StrAppend(&out, rest.substr(0, open));
        rest.remove_prefix(close + 2);
        changed = true;
        if (!absl::ConsumePrefix(&expr, "jobs.") || !absl::ConsumeSuffix(&expr, ".export_dir") ||
            expr.empty()) {
          v.Add(field, absl::StrCat("template \"{{ ", expr,
                                    " }}\" is not supported; the only one is {{ jobs.NAME.export_dir }}"));
          continue;
        }
        const std::string ref(expr);
        std::optional<Target> t = Find(self, ref, field, v, &error);
        if (!error.ok()) return error;
        if (!t.has_value()) continue;
        const std::string key = t->id ? absl::StrCat(*t->id) : absl::StrCat("#", t->batch_index);
        if (!parents.count(key)) {
          v.Add(field, absl::StrCat("reads job \"", ref, "\"'s export_dir, but depends_on does not name that job ",
                                    "(the directory is complete only once it has succeeded)"));
          continue;
        }
        if (t->export_dir.empty()) {
          v.Add(field, absl::StrCat("reads job \"", ref, "\"'s export_dir, but that job sets no output.export_dir"));
          continue;
        }
        absl::StrAppend(&out, t->export_dir);
      }
      if (changed) {
        absl::StrAppend(&out, rest);
        *value = out;
      }
    }
    for (const auto& [field, value] :
         {std::pair<const char*, const std::string*>{"checkpoint.dir", &spec->checkpoint().dir()},
          {"output.export_dir", &spec->output().export_dir()}}) {
      if (value->find(kOpen) != std::string::npos) {
        v.Add(field, "may not hold a template: a job writes only directories of its own");
      }
    }
    return absl::OkStatus();
  }

  std::vector<BatchEntry>& batch_;
  const std::string& user_;
  const bool admin_;
  const ParentLookup& lookup_;
  std::map<std::string, std::vector<int>> by_name_;
};

}  // namespace

absl::Status ResolveBatchDependencies(std::vector<BatchEntry>& batch, const std::string& user,
                                      bool admin, const ParentLookup& lookup) {
  return Resolver(batch, user, admin, lookup).Run();
}

void KeepResolvedReferences(const v1::JobSpec& resolved, v1::JobSpec* submitted) {
  if (submitted->depends_on_size() > 0) *submitted->mutable_depends_on() = resolved.depends_on();
  // Only the fields that held a template: setting one creates its section.
  auto keep = [](const std::string& written, const std::string& value, auto set) {
    if (absl::StrContains(written, "{{")) set(value);
  };
  keep(submitted->model().path(), resolved.model().path(),
       [&](const std::string& v) { submitted->mutable_model()->set_path(v); });
  keep(submitted->model().tokenizer(), resolved.model().tokenizer(),
       [&](const std::string& v) { submitted->mutable_model()->set_tokenizer(v); });
  keep(submitted->data().train_path(), resolved.data().train_path(),
       [&](const std::string& v) { submitted->mutable_data()->set_train_path(v); });
  keep(submitted->data().eval_path(), resolved.data().eval_path(),
       [&](const std::string& v) { submitted->mutable_data()->set_eval_path(v); });
  // The lists have the same elements in both (resolution rewrites paths only).
  for (int i = 0; i < submitted->data().train_size() && i < resolved.data().train_size(); ++i) {
    keep(submitted->data().train(i).path(), resolved.data().train(i).path(),
         [&](const std::string& v) { submitted->mutable_data()->mutable_train(i)->set_path(v); });
  }
  for (int i = 0; i < submitted->data().eval_size() && i < resolved.data().eval_size(); ++i) {
    keep(submitted->data().eval(i).path(), resolved.data().eval(i).path(),
         [&](const std::string& v) { submitted->mutable_data()->mutable_eval(i)->set_path(v); });
  }
  keep(submitted->checkpoint().resume(), resolved.checkpoint().resume(),
       [&](const std::string& v) { submitted->mutable_checkpoint()->set_resume(v); });
  keep(submitted->peft().adapter_path(), resolved.peft().adapter_path(),
       [&](const std::string& v) { submitted->mutable_peft()->set_adapter_path(v); });
}

std::vector<int64_t> ParentIds(const v1::JobSpec& spec) {
  std::vector<int64_t> ids;
  for (const v1::JobDependency& d : spec.depends_on()) {
    if (std::optional<int64_t> id = AsJobId(d.job())) ids.push_back(*id);
  }
  return ids;
}

DependencyVerdict EvaluateDependencies(const v1::JobSpec& spec,
                                       const std::map<int64_t, v1::JobState>& states) {
  DependencyVerdict waiting;
  for (const v1::JobDependency& d : spec.depends_on()) {
    std::optional<int64_t> id = AsJobId(d.job());
    if (!id.has_value()) continue;
    const std::string& on = d.on().empty() ? std::string(kDependsOnSucceeded) : d.on();
    auto it = states.find(*id);
    if (it == states.end()) {
      return {DependencyVerdict::kImpossible,
              absl::StrCat("dependency job ", *id, " no longer exists (depends_on: ", on, ")")};
    }
    const v1::JobState state = it->second;
    if (IsTerminal(state)) {
      if (on == kDependsOnFinished || state == v1::SUCCEEDED) continue;
      return {DependencyVerdict::kImpossible,
              absl::StrCat("dependency job ", *id, " ", v1::JobState_Name(state), " (depends_on: ", on, ")")};
    }
    if (waiting.kind == DependencyVerdict::kReady) {
      waiting = {DependencyVerdict::kWaiting,
                 absl::StrCat("waiting for job ", *id, " (", v1::JobState_Name(state), ")")};
    }
  }
  return waiting;
}

}  // namespace llamafleet
