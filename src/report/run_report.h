#pragma once
// The report of one metered run (`gpumeter run`'s end-of-run report, `gpumeter report RUN`): computed from
// a ledger RunRecord plus per-GPU usage, progress and actions, rendered as text, JSON or CSV.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "catalog/catalog.h"
#include "findings/findings.h"
#include "guard/target_guard.h"
#include "meter/run_meter.h"
#include "report/kpi.h"
#include "store/store.h"

namespace gm::guard {
struct SessionOutcome;
}

namespace gm::report {

/// A cheaper GPU whose memory holds the observed peak with headroom.
struct RightsizingHint {
  std::string gpu;               ///< catalog id
  double usd_per_gpu_hour = 0;   ///< its reference price
  double price_ratio = 0;        ///< its reference price / that of the run's GPU (else / the run's price)
  std::string price_basis;       ///< which prices the ratio compares, with the figures
  std::uint64_t peak_bytes = 0;  ///< observed peak memory
  std::uint64_t gpu_memory_bytes = 0;
  std::string assumption;  ///< the speed assumption, stated
};

/// The billed time before the job's GPUs first did work: environment set-up, image pull, downloads, model
/// loading, CUDA context and first batch (docs/findings.md `startup_overhead`). First work: utilization
/// >= kIdleUtilPct on a used GPU (any allocated GPU when none was seen used) or the first progress step,
/// whichever is first. A process of the job holding a GPU (a CUDA context) is not yet work.
struct Startup {
  std::int64_t ms = 0;                   ///< from the run's start to the first GPU work (`startup_s`)
  MicroUsd cost_micros = 0;              ///< that time on every allocated GPU at the run's price
  double share_of_run = 0;               ///< of the run's cost
  std::optional<double> share_of_total;  ///< of the job's whole cost when progress tells it (see run_startup)
  std::optional<MicroUsd> total_micros;  ///< that whole cost
};

/// The start-up of a run from its GPUs' first work or its first progress step (`first_step_ms`); the whole
/// job's cost is the forecast when the ledger has one, else the cost scaled to total_steps when the job
/// reported progress. nullopt without a price, GPU telemetry, or any GPU work or step.
std::optional<Startup> run_startup(const store::RunRecord& run, const std::vector<meter::GpuUsage>& gpus,
                                   std::optional<std::int64_t> steps, std::optional<std::int64_t> total_steps,
                                   std::optional<std::int64_t> first_step_ms);

/// When a process of the job first appeared on any of its GPUs (ms since the start; `process_on_gpu_s`).
std::optional<std::int64_t> process_on_gpu_ms(const std::vector<meter::GpuUsage>& gpus);

/// When the job first reported a step past 0 (ms since the start); nullopt: it never did.
std::optional<std::int64_t> first_step_ms(const std::vector<store::ProgressRecord>& progress);

/// One run's report.
struct RunReport {
  store::RunRecord run;
  std::vector<meter::GpuUsage> gpus;  ///< allocated GPUs
  std::vector<store::ActionRecord> actions;
  double wall_s = 0;
  double idle_cost_usd = 0;                     ///< on used GPUs
  double unused_gpu_cost_usd = 0;               ///< billed cost of allocated GPUs the job never used
  std::optional<double> effective_utilization;  ///< Σ busy_s / (wall_s × allocated GPUs)
  std::optional<std::int64_t> steps, total_steps, samples, tokens;
  std::optional<double> usd_per_step, usd_per_1k_samples, usd_per_1m_tokens;
  std::map<std::string, double> metrics;  ///< the last value of each metric the job reported (loss, acc)
  std::string telemetry = "nvml";         ///< "none": no GPU telemetry, wall time × price (DESIGN §3)
  std::optional<RightsizingHint> rightsizing;
  std::optional<Startup> startup;      ///< billed time before the first GPU work
  std::optional<double> mfu;           ///< model FLOPs utilisation after start-up (ratio 0-1)
  std::optional<double> flops_per_token;  ///< what the tokens are measured with
  std::optional<std::string> mfu_basis;   ///< where that figure and the peak came from
  std::optional<std::int64_t> process_on_gpu_ms;  ///< a process of the job first on a GPU (not yet work)
  /// false: the run ended (stopped, failed, interrupted, preempted) or is still running before its first
  /// GPU work and first step; its utilization findings, rightsizing and per-month figures are withheld.
  /// nullopt: no GPU telemetry and no progress to tell.
  std::optional<bool> steady_state;
  std::optional<ServingKpis> serving;  ///< runs that wrapped an inference server (--inference-endpoint)
  std::vector<findings::Finding> findings;  ///< advice with the dollars at stake (docs/findings.md)
  std::vector<std::string> notes;
  std::vector<store::CellRecord> cells;  ///< notebook cells (`gpumeter attach` under the IPython extension)
  std::optional<guard::TargetOutcome> target;  ///< --target: the forecast to reach it (docs/run.md "Targets")
};

/// A run's status in words, the same in text, JSON and HTML: "succeeded", "failed (exit 1)",
/// "interrupted (SIGINT)", "stopped by budget", "running", "could not start (exit 127)".
std::string describe_status(const store::RunRecord& run);

/// Headroom over the observed peak memory required of a rightsizing candidate (fraction).
inline constexpr double kRightsizingHeadroom = 0.20;

/// Builds the report. `catalog` may be null (no rightsizing hint then); `inference`: the serving counters
/// of a run that wrapped an inference server.
RunReport build_run_report(const store::RunRecord& run, std::vector<meter::GpuUsage> gpus,
                           const std::vector<store::ProgressRecord>& progress,
                           std::vector<store::ActionRecord> actions, const catalog::Catalog* catalog,
                           const std::vector<store::InferenceRecord>& inference = {});
/// Builds the report of a run stored in the ledger.
Result<RunReport> load_run_report(const store::Ledger& ledger, std::int64_t run_id,
                                  const catalog::Catalog* catalog);
/// A stored run's target (--target): replayed from its progress points as the live run forecast it (the
/// ledger's `target_set` action names it); nullopt when the run had none.
std::optional<guard::TargetOutcome> replay_run_target(const store::RunRecord& run,
                                                      const std::vector<store::ProgressRecord>& progress,
                                                      const std::vector<store::ActionRecord>& actions);
/// Builds the end-of-run report of a supervised run (`run`, `attach`) from its outcome, as
/// `report RUN` builds it from the ledger. `catalog` may be null (no rightsizing hint then).
RunReport session_report(const guard::SessionOutcome& outcome, const catalog::Catalog* catalog);

/// Findings of a run: unused GPUs, low effective utilisation, a cheaper GPU that holds the peak memory, a
/// forecast beyond the budget; most severe first. Empty without a price.
std::vector<findings::Finding> run_findings(const RunReport& report);

/// Human text (several lines; `simulated` prefixes the heading with SIMULATED).
std::string render_run_report_text(const RunReport& report, bool simulated = false);
/// JSON with the documented keys (run_id, command, exit_code, stopped_by, wall_s, billed_s, cost_usd, ...).
std::string render_run_report_json(const RunReport& report);
/// CSV: a header row and one row per run (the scalar keys of the JSON).
std::string render_run_report_csv(const RunReport& report);

}  // namespace gm::report
