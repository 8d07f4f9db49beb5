#pragma once
// The fleet report: what the agents' counters say over a time range, asked of Prometheus (PromQL increase()
// over gpumeter_* series). A client of the Prometheus HTTP API, independent of the agent that exports them.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "util/http_client.h"
#include "util/result.h"

namespace gm::report {

/// One group of a fleet report.
struct FleetRow {
  std::string key;  ///< namespace / slurm job / user / "instance gpu model"; "" = none
  double cost_usd = 0;
  std::optional<double> energy_j;  ///< nullopt when no series had energy
  std::optional<double> gpu_seconds;
};

/// Fleet totals and groups over a time range, from PromQL increase() over the agents' counters.
struct FleetReport {
  std::string by;  ///< namespace | job | user | gpu
  std::int64_t range_ms = 0;
  double device_cost_usd = 0;  ///< Σ increase(gpumeter_gpu_cost_usd_total)
  double owner_cost_usd = 0;   ///< Σ increase(gpumeter_owner_cost_usd_total)
  double unallocated_cost_usd = 0;
  double idle_cost_usd = 0;
  /// Σ increase(gpumeter_gpu_idle_held_cost_usd_total): GPUs held by processes while idle; nullopt when no
  /// agent exports it (agents older than the series).
  std::optional<double> idle_held_cost_usd;
  std::vector<FleetRow> rows;  ///< most expensive first
};

/// Queries Prometheus at `prometheus_url` (http://host:port) through `http` for the last `range_ms`, grouped
/// `by`. Errors: usage for a bad `by`/URL, unavailable when Prometheus cannot be reached or answers an error.
Result<FleetReport> query_fleet_report(const std::string& prometheus_url, std::int64_t range_ms,
                                       const std::string& by, util::HttpClient& http = util::system_http());

/// One answer of the Prometheus HTTP API to an instant query: its HTTP status and body.
struct PrometheusAnswer {
  int http_status = 0;
  std::string body;
};
/// Asks one PromQL instant query; error (unavailable) when Prometheus cannot be reached.
using PrometheusQuery = std::function<Result<PrometheusAnswer>(const std::string& promql)>;
/// query_fleet_report over any source of answers (tests, fuzzing); `prometheus_url` is only used in messages.
/// Answers that are not a Prometheus vector of finite numbers are errors (unavailable), never numbers.
Result<FleetReport> fleet_report_from(const PrometheusQuery& query, const std::string& prometheus_url,
                                      std::int64_t range_ms, const std::string& by);

}  // namespace gm::report
