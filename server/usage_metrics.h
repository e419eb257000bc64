#ifndef LLAMAFLEET_SERVER_USAGE_METRICS_H_
#define LLAMAFLEET_SERVER_USAGE_METRICS_H_

// GPU time and cost per queue and user as Prometheus counters, read at scrape time from
// the usage totals plus the active attempts up to now (storage/usage_store.h): they grow
// while attempts run and do not go down when jobs are deleted.
//   llamafleet_gpu_seconds_total{queue,user}         allocated GPUs (CPU ranks) x seconds
//   llamafleet_failed_gpu_seconds_total{queue,user}  of which failed or preempted attempts
//   llamafleet_cost_total{queue,user}                priced attempts' cost; only series
//                                                    with a price

#include "server/metrics.h"
#include "storage/job_store.h"
#include "storage/usage_store.h"

namespace llamafleet {

void CollectUsage(JobStore& store, const PriceTable& pricing, metrics::Exposition* out);

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_USAGE_METRICS_H_
