// `submit -f FILE... [--set key=value]...`: every document of every file, with the changes;
// one job is a SubmitJob, more go as SubmitJobs calls of at most kMaxBatchSize jobs each.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "clients/cli/command.h"
#include "clients/cli/evaluation_line.h"
#include "clients/cli/output.h"
#include "common/status_macros.h"
#include "jobspec/jobspec.h"

namespace llamafleet::cli {
namespace {

absl::StatusOr<std::string> ReadInput(const std::string& file, std::istream& in) {
  if (file == "-") {
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::ifstream stream(file, std::ios::binary);
  if (!stream)
    return absl::NotFoundError(absl::StrCat("cannot read ", file, ": ", std::strerror(errno)));
  std::ostringstream text;
  text << stream.rdbuf();
  if (stream.bad()) return absl::DataLossError(absl::StrCat("cannot read ", file));
  return text.str();
}

// The job files `-f` names: a directory stands for its *.yaml, *.yml and *.json files
// (not recursive, sorted by name, so a re-run batches them the same way).
absl::StatusOr<std::vector<std::string>> ExpandJobFiles(const std::vector<std::string>& args) {
  std::vector<std::string> files;
  for (const std::string& arg : args) {
    struct stat st = {};
    if (arg == "-" || stat(arg.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      files.push_back(arg);  // a missing file is reported when it is read
      continue;
    }
    DIR* dir = opendir(arg.c_str());
    if (dir == nullptr) {
      return absl::NotFoundError(absl::StrCat("cannot read ", arg, ": ", std::strerror(errno)));
    }
    std::vector<std::string> names;
    while (const dirent* entry = readdir(dir)) {
      const std::string name = entry->d_name;
      if (name.empty() || name[0] == '.') continue;
      if (!absl::EndsWith(name, ".yaml") && !absl::EndsWith(name, ".yml") &&
          !absl::EndsWith(name, ".json")) {
        continue;
      }
      const std::string path = absl::StrCat(arg, absl::EndsWith(arg, "/") ? "" : "/", name);
      if (stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) names.push_back(path);
    }
    closedir(dir);
    if (names.empty()) {
      return UsageError(absl::StrCat("-f ", arg, ": no *.yaml, *.yml or *.json files in it"));
    }
    std::sort(names.begin(), names.end());
    files.insert(files.end(), names.begin(), names.end());
  }
  if (std::count(files.begin(), files.end(), "-") > 1) {
    return UsageError("-f -: stdin can be read only once");
  }
  return files;
}

// Submission errors read in terms of the file the user wrote.
// `documents` names each job of the batch by file and document ("b.yaml document 2") when
// the batch came from several files; empty otherwise.
// `sources` names each job's file and field positions, for "<file>:<line>:" prefixes.
absl::Status SubmitError(const absl::Status& status, const std::vector<std::string>& documents,
                         const std::vector<JobSource>& sources) {
  const std::vector<v1::FieldViolation> violations = FieldViolationsOf(status);
  if (status.code() != absl::StatusCode::kInvalidArgument || violations.empty()) {
    return status;  // not about the spec (e.g. a malformed --user)
  }
  return absl::InvalidArgumentError(
      absl::StrCat("invalid job spec: ", SpecErrorsForFile(violations, documents, sources)));
}

void PrintSubmitted(const Context& ctx, const v1::SubmitJobsResponse& response, bool dry_run) {
  if (PrintMachine(ctx, response)) return;
  for (int i = 0; i < response.jobs_size(); ++i) {
    const v1::SubmitJobResponse& r = response.jobs(i);
    if (dry_run) {
      // The effective specs, as a multi-document YAML that could be submitted as is.
      if (i > 0) *ctx.out << "---\n";
      *ctx.out << "# " << r.job().spec().name() << ": valid (dry run, nothing stored)\n";
      if (r.job().has_memory_estimate()) {
        *ctx.out << "# memory estimate: " << MemoryEstimateLine(r.job().memory_estimate()) << "\n";
      }
      if (r.job().has_step_time_estimate()) {
        *ctx.out << "# step estimate: " << StepTimeLine(r.job().step_time_estimate()) << "\n";
      }
      // LoRA, or any preset (whose parameter count the estimate knows).
      const std::string& method = r.job().spec().peft().method();
      if (const std::string evaluation = EvaluationLine(r.job().spec()); !evaluation.empty()) {
        *ctx.out << "# evaluation: " << evaluation << "\n";
      } else if (method == "lora" || method == "qlora" || r.job().memory_estimate().parameters() > 0) {
        *ctx.out << "# finetuning: " << FinetuningLine(r.job()) << "\n";
      }
      if (const std::string tp = ParallelismLine(r.job().spec()); !tp.empty()) {
        *ctx.out << "# parallelism: " << tp << "\n";
      }
      if (const std::string data = DataLine(r.job().spec()); !data.empty()) {
        *ctx.out << "# data: " << data << "\n";
      }
      *ctx.out << ToYaml(r.job().spec());
    } else {
      *ctx.out << SubmittedLine(r) << "\n";
    }
  }
}

}  // namespace

std::string SubmittedLine(const v1::SubmitJobResponse& response) {
  const v1::Job& job = response.job();
  const std::string from = job.derived_from().empty()
                               ? ""
                               : absl::StrCat(" (resubmitted from job ", job.derived_from(), ")");
  if (response.created()) return absl::StrCat("job ", job.id(), " created", from);
  std::string line = absl::StrCat("job ", job.id(), " already exists (idempotency key ",
                                  job.idempotency_key(), ")");
  if (job.state() == v1::FAILED || job.state() == v1::CANCELLED) {
    absl::StrAppend(&line, ": it ", job.state() == v1::FAILED ? "FAILED" : "was CANCELLED",
                    "; to run it again: llamafleet resubmit ", job.id(), " [--set key=value ...]");
  }
  return line;
}

absl::Status CheckOverrides(const std::vector<std::string>& overrides) {
  for (const std::string& o : overrides) {
    v1::JobSpec scratch;
    if (absl::Status s = ApplySetOverride(&scratch, o); !s.ok()) {
      const std::string message(s.message());
      return UsageError(absl::StartsWith(message, "--set") ? message
                                                           : absl::StrCat("--set ", message));
    }
  }
  return absl::OkStatus();
}

absl::Status RunSubmit(const Context& ctx, const SubmitFlags& flags) {
  LF_RETURN_IF_ERROR(CheckOverrides(flags.overrides));
  LF_ASSIGN_OR_RETURN(std::vector<std::string> files, ExpandJobFiles(flags.files));
  // Every document of every file, in order; `documents` names each one for errors.
  std::vector<ParsedJob> parsed;
  std::vector<std::string> documents;
  std::vector<JobSource> sources;
  for (const std::string& file : files) {
    LF_ASSIGN_OR_RETURN(std::string text, ReadInput(file, *ctx.in));
    const std::string source = file == "-" ? "stdin" : file;
    absl::StatusOr<std::vector<ParsedJob>> jobs = ParseJobDocuments(text, flags.overrides);
    if (!jobs.ok()) return WithContext(jobs.status(), absl::StrCat(source, ": "));
    for (size_t i = 0; i < jobs->size(); ++i) {
      documents.push_back(jobs->size() == 1 ? source
                                            : absl::StrCat(source, " document ", i + 1));
      sources.push_back(JobSource{source, (*jobs)[i].positions});
      parsed.push_back(std::move((*jobs)[i]));
    }
  }
  if (!flags.idempotency_key.empty() && parsed.size() > 1) {
    return UsageError(absl::StrCat("--idempotency-key applies to a single job; ",
                                   files.size() == 1 ? files[0] : "the files", " hold ",
                                   parsed.size(), " (each gets a key derived from its document)"));
  }
  // One file keeps its errors as "document N"; several name the file.
  if (files.size() == 1) documents.clear();
  LF_ASSIGN_OR_RETURN(Client* client, Connect(ctx));

  v1::SubmitJobsResponse responses;
  // A sweep is one document but many jobs: only SubmitJobs answers with all of them.
  if (parsed.size() == 1 && parsed[0].spec.sweep().parameters().empty()) {
    v1::SubmitJobRequest request;
    *request.mutable_spec() = std::move(parsed[0].spec);
    request.set_idempotency_key(flags.idempotency_key.empty() ? parsed[0].idempotency_key
                                                              : flags.idempotency_key);
    request.set_dry_run(flags.dry_run);
    absl::StatusOr<v1::SubmitJobResponse> response = client->SubmitJob(request);
    if (!response.ok()) return SubmitError(response.status(), documents, sources);
    *responses.add_jobs() = std::move(*response);
  } else {
    // One call per kMaxBatchSize jobs: the coordinator stores each batch whole or not at
    // all. A later batch that fails leaves the earlier ones stored; re-running the same
    // command is safe, since every document keeps its derived idempotency key.
    for (size_t begin = 0; begin < parsed.size(); begin += kMaxBatchSize) {
      const size_t end = std::min(parsed.size(), begin + static_cast<size_t>(kMaxBatchSize));
      v1::SubmitJobsRequest request;
      request.set_dry_run(flags.dry_run);
      for (size_t i = begin; i < end; ++i) {
        v1::SubmitJobRequest* item = request.add_jobs();
        *item->mutable_spec() = std::move(parsed[i].spec);
        item->set_idempotency_key(flags.idempotency_key.empty() ? parsed[i].idempotency_key
                                                                : flags.idempotency_key);
      }
      absl::StatusOr<v1::SubmitJobsResponse> response = client->SubmitJobs(request);
      if (!response.ok()) {
        const std::vector<std::string> names =
            documents.empty() ? documents
                              : std::vector<std::string>(documents.begin() + begin,
                                                         documents.begin() + end);
        absl::Status status = SubmitError(
            response.status(), names,
            std::vector<JobSource>(sources.begin() + begin, sources.begin() + end));
        if (begin > 0) {
          PrintSubmitted(ctx, responses, flags.dry_run);
          status = WithContext(status, absl::StrCat("jobs ", begin + 1, "-", end, " (the first ",
                                                    begin, " were submitted): "));
        }
        return status;
      }
      for (v1::SubmitJobResponse& r : *response->mutable_jobs()) {
        *responses.add_jobs() = std::move(r);
      }
    }
  }
  PrintSubmitted(ctx, responses, flags.dry_run);
  if (!flags.wait || flags.dry_run) return absl::OkStatus();
  ctx.out->flush();  // a script sees its job ids before the wait begins
  std::vector<std::string> ids;
  for (const v1::SubmitJobResponse& r : responses.jobs()) ids.push_back(r.job().id());
  return RunWait(ctx, ids, /*succeeded_only=*/true);
}

}  // namespace llamafleet::cli
