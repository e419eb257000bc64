#include "storage/dir_claims.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "storage/job_reads.h"
#include "storage/job_store.h"
#include "storage/txn_helpers.h"

namespace llamafleet {
namespace {

using storage_internal::EachRow;
using storage_internal::Exec;
using storage_internal::RequireJob;

// Where claims are recorded, and when one still stands.
struct ClaimSource {
  const char* field;  // the spec field that names the directory
  const char* table;
  const char* id;      // the job id column
  const char* column;  // the directory column
  std::string stands;  // SQL: the claim still stands
  std::string wrote;   // SQL: the job wrote there
  bool deleted;        // a deleted job's: clashes only for other owners
};

const std::vector<ClaimSource>& Sources() {
  static const auto* kSources = [] {
    const std::string ended =
        absl::StrCat("state IN (", static_cast<int>(v1::SUCCEEDED), ", ",
                     static_cast<int>(v1::FAILED), ", ", static_cast<int>(v1::CANCELLED), ")");
    const std::string checkpointed =
        "EXISTS (SELECT 1 FROM checkpoints c WHERE c.job_id = jobs.id)";
    const std::string exported = absl::StrCat("state = ", static_cast<int>(v1::SUCCEEDED));
    return new std::vector<ClaimSource>{
        {"checkpoint.dir", "jobs", "id", "checkpoint_dir",
         absl::StrCat("(NOT ", ended, " OR ", checkpointed, ")"), checkpointed, false},
        {"output.export_dir", "jobs", "id", "export_dir",
         absl::StrCat("(NOT ", ended, " OR ", exported, ")"), exported, false},
        {"checkpoint.dir", "deleted_job_dirs", "job_id", "dir", "1", "1", true}};
  }();
  return *kSources;
}

bool IsPending(const std::vector<PendingClaim>& pending, const ClaimSource& source,
               int64_t job_id) {
  if (source.deleted) return false;
  return std::any_of(pending.begin(), pending.end(), [&](const PendingClaim& p) {
    return p.job_id == job_id && p.field == source.field;
  });
}

// Runs a bound claims query and appends its rows (id, owner, wrote[, dir]) to *out, up
// to `limit` in all; `dir` names the directory when the query does not select it.
absl::Status CollectClaims(sqlite::Statement& s, const ClaimSource& source, const std::string& dir,
                           const std::vector<PendingClaim>& pending, size_t limit,
                           std::vector<DirClaim>* out) {
  absl::Status status = EachRow(s, [&](sqlite::Statement& row) {
    if (out->size() >= limit) return absl::CancelledError();  // enough: stop stepping
    const int64_t job = row.ColumnInt(0);
    if (IsPending(pending, source, job)) return absl::OkStatus();
    out->push_back(DirClaim{job, row.ColumnText(1), source.field,
                            dir.empty() ? row.ColumnText(3) : dir, source.deleted,
                            row.ColumnInt(2) != 0});
    return absl::OkStatus();
  });
  s.Reset();
  return absl::IsCancelled(status) ? absl::OkStatus() : status;
}

// The standing claims on exactly `dir` in `source`.
absl::Status ClaimsOn(Txn& txn, const ClaimSource& source, const std::string& dir,
                      const std::string& owner, const std::vector<PendingClaim>& pending,
                      size_t limit, std::vector<DirClaim>* out) {
  LF_ASSIGN_OR_RETURN(auto* s, txn.Statement(absl::StrCat(
                                   "SELECT ", source.id, ", owner, ", source.wrote, " FROM ",
                                   source.table, " WHERE ", source.column, " = ?1 AND ",
                                   source.stands, source.deleted ? " AND owner != ?2" : "")));
  s->Bind(1, dir);
  if (source.deleted) s->Bind(2, owner);
  return CollectClaims(*s, source, dir, pending, limit, out);
}

// The standing claims in `source` strictly below `dir`.
absl::Status ClaimsBelow(Txn& txn, const ClaimSource& source, const std::string& dir,
                         const std::string& owner, const std::vector<PendingClaim>& pending,
                         size_t limit, std::vector<DirClaim>* out) {
  LF_ASSIGN_OR_RETURN(
      auto* s,
      txn.Statement(absl::StrCat(
          "SELECT ", source.id, ", owner, ", source.wrote, ", ", source.column, " FROM ",
          source.table, " WHERE ", source.column, " > ?1 AND ", source.column, " < ?3 AND ",
          source.stands, source.deleted ? " AND owner != ?2" : "", " ORDER BY ", source.column)));
  // [low, high): every normalized path strictly below `dir` ('/' + 1 == '0').
  const std::string low = dir == "/" ? "/" : dir + "/";
  std::string high = low;
  high.back() = static_cast<char>(high.back() + 1);
  s->Bind(1, low).Bind(3, high);
  if (source.deleted) s->Bind(2, owner);
  return CollectClaims(*s, source, "", pending, limit, out);
}

// Whether the input's owner already used its idempotency key: the submission then returns
// that job and stores nothing.
absl::StatusOr<bool> KeyUsed(Txn& txn, const SubmitJobInput& in) {
  if (in.idempotency_key.empty()) return false;
  LF_ASSIGN_OR_RETURN(
      auto* s, txn.Statement("SELECT 1 FROM jobs WHERE owner = ?1 AND idempotency_key = ?2"));
  s->Bind(1, in.owner).Bind(2, in.idempotency_key);
  absl::StatusOr<bool> row = s->Step();
  s->Reset();
  return row;
}

bool Within(const std::string& a, const std::string& b) {
  return a == b || (a.size() > b.size() && a.compare(0, b.size(), b) == 0 &&
                    (b == "/" || a[b.size()] == '/'));
}

}  // namespace

std::string DirClaim::Describe() const {
  return absl::StrCat(
      field == "checkpoint.dir" ? "the checkpoint directory of " : "the export directory of ",
      deleted ? "deleted job " : "job ", job_id);
}

absl::StatusOr<std::vector<DirClaim>> ClashingClaims(Txn& txn, const std::string& dir,
                                                     const std::string& owner,
                                                     const std::vector<PendingClaim>& pending,
                                                     int limit) {
  std::vector<DirClaim> out;
  const size_t max = static_cast<size_t>(std::max(limit, 0));
  for (const ClaimSource& source : Sources()) {
    for (const std::string& d : SelfAndAncestors(dir)) {
      LF_RETURN_IF_ERROR(ClaimsOn(txn, source, d, owner, pending, max, &out));
    }
    LF_RETURN_IF_ERROR(ClaimsBelow(txn, source, dir, owner, pending, max, &out));
  }
  return out;
}

absl::Status CheckJobDirFree(Txn& txn, const std::string& prefix, absl::string_view field,
                             const std::string& dir, const std::string& owner,
                             const std::vector<PendingClaim>& pending) {
  LF_ASSIGN_OR_RETURN(std::vector<DirClaim> clashes, ClashingClaims(txn, dir, owner, pending, 1));
  if (clashes.empty()) return absl::OkStatus();
  const DirClaim& c = clashes.front();
  const std::string how = c.dir == dir         ? "is "
                          : Within(dir, c.dir) ? absl::StrCat("is inside ", c.dir, ", ")
                                               : absl::StrCat("contains ", c.dir, ", ");
  const bool checkpoint = field == "checkpoint.dir";
  return absl::FailedPreconditionError(absl::StrCat(
      prefix, field, " ", dir, " ", how, c.Describe(),
      c.deleted ? ", which stays its owner's; name a directory of your own"
      : checkpoint
          ? "; every job needs a checkpoint directory of its own (leave checkpoint.dir empty for "
            "the default, or read another job's checkpoint with checkpoint.resume)"
          : "; every job needs an export directory of its own: name a new one"));
}

absl::StatusOr<std::vector<bool>> KnownSubmissions(JobStore& store,
                                                   const std::vector<SubmitJobInput>& inputs) {
  std::vector<bool> known(inputs.size(), false);
  LF_RETURN_IF_ERROR(store.Read([&](sqlite::Connection& conn) -> absl::Status {
    Txn txn(conn, 0);
    for (size_t i = 0; i < inputs.size(); ++i) {
      LF_ASSIGN_OR_RETURN(bool used, KeyUsed(txn, inputs[i]));
      known[i] = used;
    }
    return absl::OkStatus();
  }));
  return known;
}

absl::Status CheckJobDirsFree(JobStore& store, const std::vector<SubmitJobInput>& inputs,
                              const std::vector<bool>& known_in) {
  std::vector<bool> known = known_in;
  if (known.empty()) {
    LF_ASSIGN_OR_RETURN(known, KnownSubmissions(store, inputs));
  }
  return store.Read([&](sqlite::Connection& conn) -> absl::Status {
    Txn txn(conn, 0);
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (known[i]) continue;
      const v1::JobSpec& spec = inputs[i].spec;
      for (const auto& [field, dir] : {std::pair<absl::string_view, const std::string*>{
                                           "checkpoint.dir", &spec.checkpoint().dir()},
                                       {"output.export_dir", &spec.output().export_dir()}}) {
        if (dir->empty()) continue;
        LF_RETURN_IF_ERROR(CheckJobDirFree(txn, inputs[i].field_prefix, field, *dir,
                                           inputs[i].owner, inputs[i].pending_claims));
        for (size_t j = 0; j < i; ++j) {
          if (known[j]) continue;
          const v1::JobSpec& other_spec = inputs[j].spec;
          for (const auto& [other_field, other] :
               {std::pair<absl::string_view, const std::string*>{"checkpoint.dir",
                                                                 &other_spec.checkpoint().dir()},
                {"output.export_dir", &other_spec.output().export_dir()}}) {
            if (other->empty() || !(Within(*dir, *other) || Within(*other, *dir))) continue;
            return absl::FailedPreconditionError(absl::StrCat(
                inputs[i].field_prefix, field, " ", *dir, " shares files with ", *other, ", the ",
                inputs[j].field_prefix, other_field, "; every job needs directories of its own"));
          }
        }
      }
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<std::vector<DirClaim>> CheckpointClaimsOver(JobStore& store,
                                                           const std::string& path) {
  std::vector<DirClaim> out;
  LF_RETURN_IF_ERROR(store.Read([&](sqlite::Connection& conn) -> absl::Status {
    Txn txn(conn, 0);
    for (const ClaimSource& source : Sources()) {
      if (std::string(source.field) != "checkpoint.dir") continue;
      for (const std::string& d : SelfAndAncestors(path)) {
        // Every owner's: `owner` "" matches no deleted job's.
        LF_RETURN_IF_ERROR(ClaimsOn(txn, source, d, "", {}, SIZE_MAX, &out));
      }
    }
    return absl::OkStatus();
  }));
  return out;
}

TxnFunction ReleaseDirClaimsTxn(std::string dir, std::string actor,
                                std::shared_ptr<std::vector<DirClaim>> released) {
  return [dir = std::move(dir), actor = std::move(actor),
          released = std::move(released)](Txn& txn) -> absl::Status {
    released->clear();
    for (const ClaimSource& source : Sources()) {
      // Every record of `dir`, standing or not.
      LF_ASSIGN_OR_RETURN(auto* s, txn.Statement(absl::StrCat("SELECT ", source.id, ", owner, ",
                                                              source.wrote, " FROM ", source.table,
                                                              " WHERE ", source.column, " = ?1")));
      s->Bind(1, dir);
      const size_t before = released->size();
      LF_RETURN_IF_ERROR(CollectClaims(*s, source, dir, {}, SIZE_MAX, released.get()));
      for (size_t i = before; i < released->size(); ++i) {
        const DirClaim& c = (*released)[i];
        LF_RETURN_IF_ERROR(Exec(
            txn,
            source.deleted ? "DELETE FROM deleted_job_dirs WHERE dir = ?2"
                           : absl::StrCat("UPDATE jobs SET ", source.column,
                                          " = NULL WHERE id = ?1 AND ", source.column, " = ?2"),
            [&](sqlite::Statement& st) {
              if (!source.deleted) st.Bind(1, c.job_id);
              st.Bind(2, dir);
            }));
        if (source.deleted) continue;  // no record left to note it in
        LF_ASSIGN_OR_RETURN(v1::Job job, RequireJob(txn, c.job_id));
        const std::string status = job.status_reason();
        LF_RETURN_IF_ERROR(txn.Transition(&job, "dir_released", job.state(),
                                          absl::StrCat(c.field, " ", dir, " released by ", actor,
                                                       ": it keeps no other job out any more"),
                                          status));
      }
    }
    if (released->empty()) return absl::NotFoundError(absl::StrCat("no job claims ", dir));
    return absl::OkStatus();
  };
}

}  // namespace llamafleet
