#ifndef LLAMAFLEET_STORAGE_METRICS_STORE_H_
#define LLAMAFLEET_STORAGE_METRICS_STORE_H_

// A job's training metrics and evaluations: the history points rank 0 reports, the
// latest point kept on the job row (Job.latest_metrics), and every evaluation. Writes are
// TxnFunctions run through JobStore::Write like the rest of the cluster's state.

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "llamafleet/v1/job.pb.h"
#include "storage/job_store.h"

namespace llamafleet {

// Appends a metrics point and makes it the job's latest; keeps at most `max_rows` per job
// by thinning older history (every other row) when exceeded.
TxnFunction RecordMetricsTxn(int64_t job_id, v1::JobMetricsPoint point, int max_rows = 4096);
// An evaluation of the job's current attempt on eval set `set` ("" for data.eval_path's): a
// row of its evaluation history and an "eval" event ("eval loss 2.3140 (perplexity 10.12)
// after step 40", "... on set code ..." for a named set); for the `primary` set (the one
// early stopping and export: best compare) also latest_metrics' eval fields
// (best_eval_loss the lowest so far). Ignored for another attempt or a job no longer
// SCHEDULED or RUNNING.
TxnFunction RecordEvalTxn(int64_t job_id, int attempt, int64_t step, double loss, double perplexity,
                          const std::string& set = "", bool primary = true);

absl::StatusOr<std::vector<v1::JobMetricsPoint>> MetricsHistory(JobStore& store, int64_t job_id,
                                                                int max_points);
// The newest `max_points` evaluations of the job, all attempts, oldest first.
absl::StatusOr<std::vector<v1::EvalPoint>> EvalHistory(JobStore& store, int64_t job_id, int max_points);

}  // namespace llamafleet

#endif  // LLAMAFLEET_STORAGE_METRICS_STORE_H_
