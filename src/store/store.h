#pragma once
// The ledger: SQLite (WAL, mode 0600) under $XDG_DATA_HOME/gpumeter/ledger.db (--ledger, $GPUMETER_LEDGER).
// Runs, 1 s samples per GPU, progress points, actions, and per-minute rollups for fast reports.
// Money is stored as integer micro-dollars. Every committed second survives a kill -9 of gpumeter.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "util/money.h"
#include "util/result.h"

namespace gm {

/// One metered run (`gpumeter run`).
struct RunRecord {
  std::int64_t id = 0;
  std::string command;                       ///< the job's argv joined with spaces
  std::string user;
  std::string host;
  std::map<std::string, std::string> labels; ///< --label k=v
  std::int64_t start_unix_ms = 0;
  std::optional<std::int64_t> end_unix_ms;   ///< nullopt while running or when interrupted
  std::string status = "running";            ///< running | finished | stopped | interrupted | failed (could not start)
  std::optional<int> exit_code;
  std::optional<std::string> stopped_by;     ///< "budget" | "forecast" | "idle"
  MicroUsd price_micros_per_gpu_hour = 0;
  std::string price_source;
  std::string provider;
  std::string region;
  std::int64_t billing_granularity_s = 1;
  std::int64_t billing_minimum_s = 0;
  std::vector<std::string> gpus_allocated;   ///< UUIDs
  std::vector<std::string> gpus_used;        ///< UUIDs where a process of the job appeared
  std::string gpu_model;                     ///< catalog GPU id (or NVML name when unknown)
  std::optional<MicroUsd> budget_micros;
  std::optional<std::int64_t> total_steps;
  // Totals written at the end (and refreshed periodically while running):
  std::int64_t wall_ms = 0;
  std::int64_t billed_s = 0;
  MicroUsd cost_micros = 0;
  MicroUsd idle_cost_micros = 0;
  MicroUsd unused_gpu_cost_micros = 0;
  double energy_j = 0;
  std::string energy_method;
  std::optional<double> co2_kg;
  std::string carbon_source;
  std::optional<double> forecast_cost_usd;
  // Liveness of the metering process (filled by begin_run when left empty), used to tell a run whose
  // gpumeter died (kill -9, power loss) from one still running:
  std::int64_t meter_pid = 0;
  std::string meter_host;
  std::int64_t heartbeat_unix_ms = 0;        ///< refreshed by update_run
  std::optional<std::int64_t> steps;         ///< last step reported
  std::optional<std::int64_t> samples_done;  ///< last samples count reported
  std::optional<std::int64_t> tokens_done;   ///< last tokens count reported
};

/// One GPU reading of a run at one second.
struct SampleRecord {
  std::int64_t run_id = 0;
  std::int64_t t_ms = 0;                     ///< ms since the run's start
  unsigned gpu_index = 0;
  std::string gpu_uuid;
  std::optional<double> utilization_pct;
  std::optional<std::uint64_t> memory_used_bytes;
  std::optional<double> power_w;
  std::optional<double> temperature_c;
  double energy_j = 0;                       ///< energy of the interval ending here
  MicroUsd cost_micros = 0;                  ///< cost of the interval ending here (this GPU)
  bool job_present = false;                  ///< a process of the job's tree was on this GPU
};

/// One progress report.
struct ProgressRecord {
  std::int64_t run_id = 0;
  std::int64_t t_ms = 0;
  std::optional<std::int64_t> step;
  std::optional<std::int64_t> total_steps;
  std::optional<std::int64_t> samples;
  std::optional<std::int64_t> tokens;
  std::map<std::string, double> metrics;
  MicroUsd cost_micros = 0;                  ///< spend when the point arrived
};

/// One budget / guard action.
struct ActionRecord {
  std::int64_t run_id = 0;
  std::int64_t t_ms = 0;
  std::string kind;                          ///< "warn", "stop_budget", "stop_forecast", "stop_idle", "sigterm", "sigkill", ...
  MicroUsd cost_micros = 0;
  std::string message;
};

/// Per-minute rollup of a run's samples (one row per run, GPU and minute).
struct RollupRecord {
  std::int64_t run_id = 0;
  std::int64_t minute_unix = 0;              ///< unix time / 60
  unsigned gpu_index = 0;
  std::int64_t samples = 0;
  double utilization_sum_pct = 0;
  double memory_max_bytes = 0;
  double energy_j = 0;
  MicroUsd cost_micros = 0;
};

/// Serving counters of a run that wraps an inference server (`gpumeter run --inference-endpoint`), per model,
/// at one sample: cumulative since the run's start (engine restarts already folded in, never decreasing).
/// Stored when they changed; nullopt where the engine has no such counter.
struct InferenceRecord {
  std::int64_t run_id = 0;
  std::int64_t t_ms = 0;  ///< ms since the run's start
  std::string model;
  std::string engine;  ///< vllm | sglang | tgi | triton
  std::optional<double> prompt_tokens;
  std::optional<double> generated_tokens;
  std::optional<double> cached_tokens;
  std::optional<double> requests;
  MicroUsd cost_micros = 0;  ///< the run's spend at this sample
};

/// One notebook cell of a run (`gpumeter attach` under the IPython extension): its cost from the meter.
struct CellRecord {
  std::int64_t run_id = 0;
  std::int64_t cell_id = 0;   ///< the kernel's execution count
  std::int64_t start_ms = 0;  ///< ms since the run's start
  std::int64_t end_ms = 0;
  MicroUsd cost_micros = 0;               ///< spend between the cell's start and end
  std::optional<double> utilization_pct;  ///< mean utilization of the allocated GPUs during the cell
  std::string status;                     ///< ok | error | interrupted | refused
  std::string source;                     ///< the cell's first line
};

/// Filter for listing runs.
struct RunFilter {
  std::optional<std::int64_t> since_unix_ms;
  std::optional<std::int64_t> until_unix_ms;
  std::optional<std::size_t> limit;
};

/// The ledger. Not thread-safe: one Ledger per thread.
class Ledger {
 public:
  /// Opens (creating with mode 0600 and WAL) the ledger at `path`. ErrorKind::unavailable with a clear
  /// message when it is locked, corrupt or not a ledger.
  static Result<std::unique_ptr<Ledger>> open(const std::string& path);
  /// The default path: $GPUMETER_LEDGER, else $XDG_DATA_HOME/gpumeter/ledger.db, else ~/.local/share/...
  static std::string default_path();
  /// A run left "running" is interrupted when its meter is gone: same host and the pid is dead (or reused
  /// by another program), or another host and no heartbeat for this long.
  static constexpr std::int64_t kStaleHeartbeatMs = 120'000;
  virtual ~Ledger() = default;

  /// Inserts a run (status running) and returns its id.
  virtual Result<std::int64_t> begin_run(const RunRecord& run) = 0;
  /// Updates a run's totals and status.
  virtual Result<void> update_run(const RunRecord& run) = 0;
  /// Appends samples / progress / actions in one transaction (committed before return).
  virtual Result<void> append(const std::vector<SampleRecord>& samples,
                              const std::vector<ProgressRecord>& progress,
                              const std::vector<ActionRecord>& actions) = 0;
  /// Appends rollups (idempotent per run/minute/gpu: replaces).
  virtual Result<void> append_rollups(const std::vector<RollupRecord>& rollups) = 0;

  /// A run by id; ErrorKind::not_found if absent. Runs left "running" by a dead gpumeter read as interrupted.
  virtual Result<RunRecord> run(std::int64_t id) const = 0;
  /// The newest run; not_found when the ledger is empty.
  virtual Result<RunRecord> last_run() const = 0;
  /// Runs, newest first.
  virtual Result<std::vector<RunRecord>> runs(const RunFilter& filter = {}) const = 0;
  virtual Result<std::vector<SampleRecord>> samples(std::int64_t run_id) const = 0;
  virtual Result<std::vector<ProgressRecord>> progress(std::int64_t run_id) const = 0;
  virtual Result<std::vector<ActionRecord>> actions(std::int64_t run_id) const = 0;
  virtual Result<std::vector<RollupRecord>> rollups(const RunFilter& filter) const = 0;
  /// Appends serving counters (committed before return). The default keeps none (ledgers without them).
  virtual Result<void> append_inference(const std::vector<InferenceRecord>& records) {
    (void)records;
    return ok_result();
  }
  /// Appends notebook cells (committed before return). The default keeps none.
  virtual Result<void> append_cells(const std::vector<CellRecord>& cells) {
    (void)cells;
    return ok_result();
  }
  /// A run's notebook cells in order; empty for runs (and ledgers) that have none.
  virtual Result<std::vector<CellRecord>> cells(std::int64_t run_id) const {
    (void)run_id;
    return std::vector<CellRecord>{};
  }
  /// A run's serving counters in time order; empty for runs (and ledgers) that have none.
  virtual Result<std::vector<InferenceRecord>> inference(std::int64_t run_id) const {
    (void)run_id;
    return std::vector<InferenceRecord>{};
  }
};

}  // namespace gm
