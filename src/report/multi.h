#pragma once
// Reports over many runs of the ledger: totals per group (user, label, GPU model, day, command), waste
// (idle cost on used GPUs, allocated GPUs never used), energy and CO2, utilization from the per-minute
// rollups, top runs, and a daily efficiency report. Renderers: text, JSON, CSV.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "findings/findings.h"
#include "meter/meter.h"
#include "report/kpi.h"
#include "store/store.h"
#include "util/money.h"
#include "util/result.h"

namespace gm::report {

/// How runs are grouped.
struct GroupBy {
  enum class Kind { none, user, label, gpu, day, command, host };
  Kind kind = Kind::none;
  std::string label_key;  ///< for Kind::label
};

/// Parses `--by` text: user | label:KEY | gpu | day | command | host | slurm-account (label:slurm.account) |
/// partition (label:slurm.partition); usage error otherwise.
Result<GroupBy> parse_group_by(std::string_view text);
/// "user", "label:team", ...
std::string group_by_name(const GroupBy& by);

/// Parses a point in time for --since / --until: a duration back from `now_unix_ms` ("7d", "12h"), a date
/// "YYYY-MM-DD" (00:00 UTC) or "YYYY-MM-DDTHH:MM[:SS]" (UTC). Usage error naming `flag` otherwise.
Result<std::int64_t> parse_time_point(std::string_view text, std::int64_t now_unix_ms, std::string_view flag);
/// Parses "YYYY-MM-DD" into unix ms at 00:00 UTC.
Result<std::int64_t> parse_date_utc(std::string_view text, std::string_view flag);
/// Formats unix ms as "YYYY-MM-DD" (UTC).
std::string format_date_utc(std::int64_t unix_ms);
/// Formats unix ms as "YYYY-MM-DD HH:MM:SS" (UTC).
std::string format_time_utc(std::int64_t unix_ms);

/// Totals of a set of runs.
struct GroupTotals {
  std::string key;  ///< group value ("" for the grand total)
  std::int64_t runs = 0;
  std::int64_t stopped_runs = 0;  ///< stopped by gpumeter (budget, forecast, idle)
  std::int64_t failed_runs = 0;   ///< finished with a non-zero exit code, or interrupted
  double wall_s = 0;
  double gpu_hours = 0;  ///< billed seconds × allocated GPUs ÷ 3600
  MicroUsd cost_micros = 0;
  MicroUsd idle_cost_micros = 0;        ///< idle share of used GPUs' cost
  MicroUsd unused_gpu_cost_micros = 0;  ///< allocated GPUs the job never used
  double energy_kwh = 0;
  std::optional<double> co2_kg;  ///< sum over runs that have it
  std::int64_t runs_without_co2 = 0;
  std::int64_t util_samples = 0;  ///< GPU-seconds in the rollups
  double util_sum_pct = 0;
  /// Waste = idle cost + unused allocated GPUs.
  MicroUsd waste_micros() const { return gm::meter::waste_micros(idle_cost_micros, unused_gpu_cost_micros); }
  /// Mean GPU utilization over the rolled-up GPU-seconds; nullopt without rollups.
  std::optional<double> mean_util_pct() const;
};

/// A run in the "top runs" list.
struct TopRun {
  std::int64_t id = 0;
  std::string command;
  std::string user;
  std::string gpu_model;
  std::size_t gpus = 0;
  std::int64_t start_unix_ms = 0;
  double wall_s = 0;
  MicroUsd cost_micros = 0;
  MicroUsd waste_micros = 0;
  store::RunStatus status = store::RunStatus::running;
  std::optional<TargetHit> target_hit;  ///< when MultiOptions::target is set and the run reached it
  std::string status_text;              ///< describe_status(): "failed (exit 1)", "stopped by budget"
};

/// One bucket of the period's timeline, from the per-minute rollups of the runs in the period.
struct TimelineBucket {
  std::int64_t start_unix_ms = 0;
  MicroUsd cost_micros = 0;  ///< Σ rollup cost (metered seconds, before billing rounding)
  std::int64_t util_samples = 0;
  double util_sum_pct = 0;
  double energy_j = 0;
};

/// What to report.
struct MultiOptions {
  std::optional<std::int64_t> since_unix_ms;  ///< runs starting at or after
  std::optional<std::int64_t> until_unix_ms;  ///< runs starting before
  GroupBy by;
  std::size_t top = 5;
  std::optional<meter::MetricTarget> target;  ///< adds "$ to reach the target" to the top runs
};

/// The multi-run report. Runs belong to the period and to a day by their start time (UTC).
struct MultiReport {
  std::optional<std::int64_t> since_unix_ms;
  std::optional<std::int64_t> until_unix_ms;
  GroupBy by;
  std::vector<GroupTotals> groups;  ///< by cost, highest first (by day: in date order)
  GroupTotals total;
  std::vector<TopRun> top_runs;  ///< by cost, highest first
  std::optional<meter::MetricTarget> target;
  std::int64_t bucket_ms = 3'600'000;    ///< timeline bucket: an hour for periods up to 3 days, else a day
  std::vector<TimelineBucket> timeline;  ///< in time order, buckets with rollups only
};

/// Builds the report from the ledger. Usage error when since >= until; an empty period is not an error
/// here (the report has zero runs): the CLI decides.
Result<MultiReport> build_multi_report(const store::Ledger& ledger, const MultiOptions& options);

/// Findings of the period (docs/findings.md "Many runs"): fleet_waste when idle GPU time and allocated GPUs
/// never used cost 5 % or more of the period, with the run that wasted most; per month when the period has
/// both ends.
std::vector<findings::Finding> multi_findings(const MultiReport& report);

/// Human-readable report.
std::string render_multi_text(const MultiReport& report);
/// JSON (stable keys, units in names, null for missing).
std::string render_multi_json(const MultiReport& report);
/// CSV: one row per group plus a "TOTAL" row.
std::string render_multi_csv(const MultiReport& report);

/// Start and end (unix ms, UTC midnight) of the daily report's day: `date` if given, else yesterday.
Result<std::pair<std::int64_t, std::int64_t>> daily_period(const std::optional<std::string>& date,
                                                           std::int64_t now_unix_ms);

/// `report`'s many-run flags as given (unset where not).
struct MultiFlags {
  std::optional<std::string> since, until, by, date, target;
  bool daily = false;  ///< with --date: that day, else yesterday (UTC), grouped by user
  std::size_t top = 5;
};
/// The options the flags describe at `now_unix_ms` (--since and --until over the --daily period); errors
/// name the flag whose text does not parse.
Result<MultiOptions> multi_options_from(const MultiFlags& flags, std::int64_t now_unix_ms);

}  // namespace gm::report
