#pragma once
// The ledger: one storage interface, two back ends. SQLite (WAL, mode 0600) under
// $XDG_DATA_HOME/gpumeter/ledger.db is the default; `postgresql://user@host:port/db` (libpq) is a ledger
// shared by many machines (--ledger, $GPUMETER_LEDGER, [ledger] location in the config file).
// Runs, 1 s samples per GPU, progress points, actions, per-minute rollups for fast reports, team budgets.
// Money is stored as integer micro-dollars. Every committed second survives a kill -9 of gpumeter.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "util/enum_text.h"
#include "util/money.h"
#include "util/result.h"

namespace gm::store {

// The ledger's closed sets of words, each an enum with its text table (util/enum_text.h: text_of, value_of,
// parse_enum). The text is what the ledger stores and JSON shows; library code compares the enums.

/// Where a run stands: running until it ends, then how it ended.
enum class RunStatus {
  running,
  succeeded,    ///< exit status 0
  failed,       ///< a non-zero exit status (or the job could not be started)
  stopped,      ///< gpumeter stopped it (RunRecord::stopped_by says why)
  preempted,    ///< the provider took the machine
  interrupted,  ///< killed by a signal, or its gpumeter died
  finished,     ///< an attached process ended (its exit status unknown); every self-ended run before issue 19
  detached,     ///< gpumeter stopped watching an attached process, which went on
};
inline constexpr util::EnumText<RunStatus> kRunStatusTexts[] = {
    {RunStatus::running, "running"},     {RunStatus::succeeded, "succeeded"},
    {RunStatus::failed, "failed"},       {RunStatus::stopped, "stopped"},
    {RunStatus::preempted, "preempted"}, {RunStatus::interrupted, "interrupted"},
    {RunStatus::finished, "finished"},   {RunStatus::detached, "detached"}};
constexpr const auto& enum_table(RunStatus) {
  return kRunStatusTexts;
}

/// Why gpumeter stopped a run (RunRecord::stopped_by holds its text, or a scheduler's own reason).
/// `mcp`: an agent asked through `gpumeter mcp`'s stop_run (the action's message keeps its reason).
enum class StopReason { budget, forecast, idle, target, preemption, mcp };
inline constexpr util::EnumText<StopReason> kStopReasonTexts[] = {
    {StopReason::budget, "budget"}, {StopReason::forecast, "forecast"},     {StopReason::idle, "idle"},
    {StopReason::target, "target"}, {StopReason::preemption, "preemption"}, {StopReason::mcp, "mcp"}};
constexpr const auto& enum_table(StopReason) {
  return kStopReasonTexts;
}

/// How a run's energy was measured (over its GPUs; a GPU's own method is gpu's EnergyMethod).
enum class RunEnergyMethod {
  not_recorded,       ///< "": not reported (a run still starting; record-job without --energy-j)
  counter,            ///< NVML's energy counter on every GPU
  power_integration,  ///< power readings integrated over time on every GPU
  mixed,              ///< some GPUs one way, some the other
  none,               ///< no GPU had an energy reading
  agent,              ///< the agent's figure, recorded by record-job
};
inline constexpr util::EnumText<RunEnergyMethod> kRunEnergyMethodTexts[] = {
    {RunEnergyMethod::not_recorded, ""},
    {RunEnergyMethod::counter, "counter"},
    {RunEnergyMethod::power_integration, "power_integration"},
    {RunEnergyMethod::mixed, "mixed"},
    {RunEnergyMethod::none, "none"},
    {RunEnergyMethod::agent, "agent"}};
constexpr const auto& enum_table(RunEnergyMethod) {
  return kRunEnergyMethodTexts;
}

/// What a recorded action (a guard decision, a signal, a note kept with the run) is.
enum class ActionKind {
  warn,           ///< a budget threshold was crossed
  stop_budget,    ///< the budget (the run's or a team's) is reached: the job is stopped
  stop_forecast,  ///< the forecast exceeds the budget: the job is stopped
  stop_idle,      ///< every GPU idle for --max-idle: the job is stopped
  stop_target,    ///< the metric target is forecast unreachable: the job is stopped
  target,         ///< a target forecast verdict
  target_set,     ///< the run's metric target settings
  sigterm,        ///< signals sent to the job
  sigint,
  sighup,
  sigquit,
  sigkill,
  sigusr1,
  sigusr2,
  signal,                ///< a signal given by number (--stop-signal 12)
  preemption_warning,    ///< the provider announced a preemption
  preempted,             ///< the machine was taken
  checkpoint,            ///< the job wrote a checkpoint
  no_recent_checkpoint,  ///< no checkpoint for longer than the expected interval on spot capacity
  idle_gpus_held,        ///< idle GPUs whose memory the job holds
  budget,                ///< the budget was changed (an attached session's control datagram)
  gpu_match,             ///< a note on how the job's GPUs were matched
  stop_requested,  ///< a stop asked from outside the run (`gpumeter mcp`'s stop_run): the job is stopped
};
inline constexpr util::EnumText<ActionKind> kActionKindTexts[] = {
    {ActionKind::warn, "warn"},
    {ActionKind::stop_budget, "stop_budget"},
    {ActionKind::stop_forecast, "stop_forecast"},
    {ActionKind::stop_idle, "stop_idle"},
    {ActionKind::stop_target, "stop_target"},
    {ActionKind::target, "target"},
    {ActionKind::target_set, "target_set"},
    {ActionKind::sigterm, "sigterm"},
    {ActionKind::sigint, "sigint"},
    {ActionKind::sighup, "sighup"},
    {ActionKind::sigquit, "sigquit"},
    {ActionKind::sigkill, "sigkill"},
    {ActionKind::sigusr1, "sigusr1"},
    {ActionKind::sigusr2, "sigusr2"},
    {ActionKind::signal, "signal"},
    {ActionKind::preemption_warning, "preemption_warning"},
    {ActionKind::preempted, "preempted"},
    {ActionKind::checkpoint, "checkpoint"},
    {ActionKind::no_recent_checkpoint, "no_recent_checkpoint"},
    {ActionKind::idle_gpus_held, "idle_gpus_held"},
    {ActionKind::budget, "budget"},
    {ActionKind::gpu_match, "gpu_match"},
    {ActionKind::stop_requested, "stop_requested"}};
constexpr const auto& enum_table(ActionKind) {
  return kActionKindTexts;
}

/// How a notebook cell ended.
enum class CellStatus {
  ok,
  error,
  interrupted,
  refused,     ///< the extension refused to run it (over the budget)
  unfinished,  ///< still running when the session ended
};
/// The statuses a cell's end datagram may give (all but unfinished, which only gpumeter records).
inline constexpr util::EnumText<CellStatus> kCellEndTexts[] = {{CellStatus::ok, "ok"},
                                                               {CellStatus::error, "error"},
                                                               {CellStatus::interrupted, "interrupted"},
                                                               {CellStatus::refused, "refused"}};
inline constexpr util::EnumText<CellStatus> kCellStatusTexts[] = {{CellStatus::ok, "ok"},
                                                                  {CellStatus::error, "error"},
                                                                  {CellStatus::interrupted, "interrupted"},
                                                                  {CellStatus::refused, "refused"},
                                                                  {CellStatus::unfinished, "unfinished"}};
constexpr const auto& enum_table(CellStatus) {
  return kCellStatusTexts;
}

/// The calendar period (UTC) a budget covers.
enum class BudgetPeriod {
  day,
  week,  ///< from Monday
  month,
};
inline constexpr util::EnumText<BudgetPeriod> kBudgetPeriodTexts[] = {
    {BudgetPeriod::day, "day"}, {BudgetPeriod::week, "week"}, {BudgetPeriod::month, "month"}};
constexpr const auto& enum_table(BudgetPeriod) {
  return kBudgetPeriodTexts;
}

// JSON shows these enums' text (text_of), never their number: a JSON value made of one does not compile.
template <class J>
void to_json(J&, RunStatus) = delete;
template <class J>
void to_json(J&, StopReason) = delete;
template <class J>
void to_json(J&, RunEnergyMethod) = delete;
template <class J>
void to_json(J&, ActionKind) = delete;
template <class J>
void to_json(J&, CellStatus) = delete;
template <class J>
void to_json(J&, BudgetPeriod) = delete;

/// One metered run (`gpumeter run`).
struct RunRecord {
  std::int64_t id = 0;
  std::string command;  ///< the job's argv joined with spaces
  std::string user;
  std::string host;
  std::map<std::string, std::string> labels;  ///< --label k=v
  std::int64_t start_unix_ms = 0;
  std::optional<std::int64_t> end_unix_ms;  ///< nullopt while running or when interrupted
  RunStatus status = RunStatus::running;
  std::optional<int> exit_code;
  /// text_of(StopReason) when gpumeter stopped it; a scheduler's reason from record-job ("slurm:TIMEOUT")
  std::optional<std::string> stopped_by;
  MicroUsd price_micros_per_gpu_hour = 0;
  std::string price_source;
  std::string provider;
  std::string region;
  std::int64_t billing_granularity_s = 1;
  std::int64_t billing_minimum_s = 0;
  std::vector<std::string> gpus_allocated;  ///< UUIDs
  std::vector<std::string> gpus_used;       ///< UUIDs where a process of the job appeared
  std::string gpu_model;                    ///< catalog GPU id (or NVML name when unknown)
  std::optional<MicroUsd> budget_micros;
  std::optional<std::int64_t> total_steps;
  // Totals written at the end (and refreshed periodically while running):
  std::int64_t wall_ms = 0;
  std::int64_t billed_s = 0;
  MicroUsd cost_micros = 0;
  MicroUsd idle_cost_micros = 0;
  MicroUsd unused_gpu_cost_micros = 0;
  double energy_j = 0;
  RunEnergyMethod energy_method = RunEnergyMethod::not_recorded;
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
  // Preemption (status "preempted") and checkpoints (issue 28):
  std::optional<std::string> preemption_provider;           ///< "aws" | "gcp" | "azure"
  std::optional<std::int64_t> preemption_notice_unix_ms;    ///< when gpumeter read the notice
  std::optional<std::int64_t> preemption_deadline_unix_ms;  ///< when the provider takes the machine
  std::optional<std::int64_t> last_checkpoint_ms;  ///< ms since the start of the last checkpoint seen
  std::optional<MicroUsd> lost_work_micros;        ///< spend since then, of a run that did not succeed
  // MFU (issue 37): the model FLOPs per token the job's tokens are measured with, where that figure came
  // from, and the precision whose dense peak MFU divides by:
  std::optional<double> flops_per_token;
  std::optional<std::string> mfu_basis;  ///< "model llama-3-8b (planner training FLOPs, seq 8192)", "client"
  std::optional<std::string> mfu_precision;  ///< "bf16" (default), "fp16", "fp8", "tf32", "fp32"
};

/// A GPU's activity over one sample interval from NVML GPM, in percent 0-100 (the ledger's copy of gpu's
/// GpmMetrics); each value nullopt where the GPU does not support it.
struct GpmPct {
  std::optional<double> sm_active, sm_occupancy, tensor_active, fp32_active, fp16_active, fp64_active,
      dram_bw_util;
  bool operator==(const GpmPct&) const = default;
};

/// One GPU reading of a run at one second.
struct SampleRecord {
  std::int64_t run_id = 0;
  std::int64_t t_ms = 0;  ///< ms since the run's start
  unsigned gpu_index = 0;
  std::string gpu_uuid;
  std::optional<double> utilization_pct;
  std::optional<std::uint64_t> memory_used_bytes;
  std::optional<double> power_w;
  std::optional<double> temperature_c;
  double energy_j = 0;       ///< energy of the interval ending here
  MicroUsd cost_micros = 0;  ///< cost of the interval ending here (this GPU)
  bool job_present = false;  ///< a process of the job's tree was on this GPU
  GpmPct gpm;                ///< GPM activity of the interval ending here
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
  MicroUsd cost_micros = 0;  ///< spend when the point arrived
};

/// One budget / guard action.
struct ActionRecord {
  std::int64_t run_id = 0;
  std::int64_t t_ms = 0;
  ActionKind kind = ActionKind::warn;
  MicroUsd cost_micros = 0;
  std::string message;
};

/// Per-minute rollup of a run's samples (one row per run, GPU and minute).
struct RollupRecord {
  std::int64_t run_id = 0;
  std::int64_t minute_unix = 0;  ///< unix time / 60
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
  CellStatus status = CellStatus::ok;
  std::string source;  ///< the cell's first line
};

/// Per-minute rollups summed per run and time bucket (what the multi-run report reads).
struct RollupBucket {
  std::int64_t run_id = 0;
  std::int64_t start_unix_ms = 0;  ///< bucket start: minute × 60 000 rounded down to the bucket
  std::int64_t samples = 0;
  double utilization_sum_pct = 0;
  double energy_j = 0;
  MicroUsd cost_micros = 0;
};

/// What a report over many runs reads of each run (Ledger::run_summaries): the run's figures without its
/// GPU lists (their count instead) and metering details, a fraction of a RunRecord's allocations.
struct RunSummary {
  std::int64_t id = 0;
  std::string command;
  std::string user;
  std::string host;
  std::map<std::string, std::string> labels;
  std::int64_t start_unix_ms = 0;
  RunStatus status = RunStatus::running;  ///< as RunRecord::status (a run whose meter died: interrupted)
  std::optional<int> exit_code;
  std::optional<std::string> stopped_by;
  std::string gpu_model;
  std::size_t gpus_allocated = 0;  ///< how many GPUs were allocated
  std::int64_t wall_ms = 0;
  std::int64_t billed_s = 0;
  MicroUsd cost_micros = 0;
  MicroUsd idle_cost_micros = 0;
  MicroUsd unused_gpu_cost_micros = 0;
  double energy_j = 0;
  std::optional<double> co2_kg;
  bool operator==(const RunSummary&) const = default;
};

/// The summary of a run.
RunSummary summarize(const RunRecord& run);

/// Filter for listing runs.
struct RunFilter {
  std::optional<std::int64_t> since_unix_ms;
  std::optional<std::int64_t> until_unix_ms;
  std::optional<std::size_t> limit;
};

/// A team budget: the spend of every run whose `selector` (k=v) matches, per calendar period (UTC).
struct BudgetRecord {
  std::string selector;  ///< "team=nlp", "project=x", "user=alice" (user and host match those columns)
  MicroUsd limit_micros = 0;
  BudgetPeriod period = BudgetPeriod::month;
  std::int64_t updated_unix_ms = 0;
};

/// What the runs matching a selector spent since a time.
struct SelectorSpend {
  MicroUsd spent_micros =
      0;  ///< Σ cost of the matching runs started since then (live runs as of their heartbeat)
  std::int64_t runs = 0;       ///< matching runs
  std::int64_t live_runs = 0;  ///< of which running now (a fresh heartbeat)
};

/// A run with everything recorded about it (ledger copy, spool replay).
struct RunBundle {
  RunRecord run;
  std::vector<SampleRecord> samples;
  std::vector<ProgressRecord> progress;
  std::vector<ActionRecord> actions;
  std::vector<RollupRecord> rollups;
  std::vector<InferenceRecord> inference;
  std::vector<CellRecord> cells;
};

/// What import_run did.
struct ImportOutcome {
  std::int64_t run_id = 0;  ///< the run's id in this ledger
  bool imported = false;    ///< false: the key was imported before (nothing written now)
};

/// Splits "k=v" into its key and value; usage error naming `what` for anything else (keys: letters, digits,
/// `_ . - /`).
Result<std::pair<std::string, std::string>> parse_selector(const std::string& selector,
                                                           const std::string& what);
/// Start (unix ms, UTC) of the budget period `period` containing `now_unix_ms`.
std::int64_t period_start_unix_ms(BudgetPeriod period, std::int64_t now_unix_ms);
/// True when a run's labels (or its user / host for those keys) match the selector key=value.
bool run_matches(const RunRecord& run, const std::string& key, const std::string& value);
/// True for a PostgreSQL location (postgresql:// or postgres://, or libpq key=value with `dbname=`).
bool is_postgres_location(const std::string& location);
/// The location with any password removed (URI user:password@, password=… key, ?password=…), for messages.
std::string redact_location(const std::string& location);

/// The ledger. Not thread-safe: one Ledger per thread.
class Ledger {
 public:
  /// The schema version this gpumeter writes; older ledgers are migrated on open (and by `ledger migrate`).
  static constexpr int kSchemaVersion = 3;
  /// Opens the ledger at `location`: a SQLite path (or `sqlite:PATH`), created with mode 0600 and WAL, or a
  /// PostgreSQL URI (schema created / migrated). ErrorKind::unavailable with a clear message (the password
  /// never in it) when it is locked, corrupt, not a ledger, or the server cannot be reached.
  static Result<std::unique_ptr<Ledger>> open(const std::string& location);
  /// The default location: $GPUMETER_LEDGER, else $XDG_DATA_HOME/gpumeter/ledger.db, else ~/.local/share/...
  static std::string default_path();
  /// A run left "running" is interrupted when its meter is gone: same host and the pid is dead (or reused
  /// by another program), or another host and no heartbeat for this long.
  static constexpr std::int64_t kStaleHeartbeatMs = 120'000;
  virtual ~Ledger() = default;

  /// Where this ledger is, for messages (the password removed).
  virtual std::string describe() const = 0;
  /// "sqlite" or "postgresql".
  virtual std::string backend() const = 0;
  /// The schema version stored in the ledger.
  virtual Result<int> schema_version() const = 0;

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
  /// The summaries of runs(filter), in its order: what reports over many runs read. The default summarizes
  /// runs().
  virtual Result<std::vector<RunSummary>> run_summaries(const RunFilter& filter) const;
  virtual Result<std::vector<SampleRecord>> samples(std::int64_t run_id) const = 0;
  virtual Result<std::vector<ProgressRecord>> progress(std::int64_t run_id) const = 0;
  virtual Result<std::vector<ActionRecord>> actions(std::int64_t run_id) const = 0;
  virtual Result<std::vector<RollupRecord>> rollups(const RunFilter& filter) const = 0;
  /// The rollups of `filter` (limit ignored) summed per run and `bucket_ms` bucket, by bucket then run: one
  /// row per run and bucket, not per minute (PostgreSQL sums in the server; SQLite while stepping through
  /// the rows). The default sums rollups().
  virtual Result<std::vector<RollupBucket>> rollup_buckets(const RunFilter& filter,
                                                           std::int64_t bucket_ms) const;
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

  /// Writes a whole run in one transaction, once per `import_key`: a key already imported is skipped and its
  /// run id returned (replays and copies are idempotent). `into_run_id` > 0: the run already exists here
  /// (begun before the ledger went away) and is updated, its rows appended; else a new run is inserted.
  virtual Result<ImportOutcome> import_run(const RunBundle& bundle, const std::string& import_key,
                                           std::int64_t into_run_id) = 0;
  /// Creates or replaces the budget of `budget.selector`.
  virtual Result<void> set_budget(const BudgetRecord& budget) = 0;
  /// Every budget, by selector.
  virtual Result<std::vector<BudgetRecord>> budgets() const = 0;
  /// Removes a budget; not_found when there is none for `selector`.
  virtual Result<void> remove_budget(const std::string& selector) = 0;
  /// Spend of the runs matching key=value started at or after `since_unix_ms`, leaving out run
  /// `exclude_run_id` (0: none). One aggregate query.
  virtual Result<SelectorSpend> selector_spend(const std::string& key, const std::string& value,
                                               std::int64_t since_unix_ms,
                                               std::int64_t exclude_run_id) const = 0;
};

/// A ledger for one run's writes on a shared (PostgreSQL) ledger that never fails the run: while the
/// ledger answers, writes go to it; when it cannot be reached (at the start or mid-run) the run goes on
/// into a local spool file (SQLite) under `spool_dir`, replayed into the ledger by finish() or, when it is
/// still down then, by the next command that opens it (replay_spool). Replays are idempotent: a spool is
/// imported once, even when two commands replay it at once. Reads go to where the writes go; a team budget
/// cannot be checked while spooling (selector_spend: unavailable).
class SpoolingLedger final : public Ledger {
 public:
  /// Never fails: an unreachable ledger starts the run spooled (see notes()).
  SpoolingLedger(std::string location, std::string spool_dir);
  ~SpoolingLedger() override;
  /// What happened, for the user: the ledger unreachable, the run spooled, replayed (passwords removed).
  std::vector<std::string> take_notes();
  /// At the run's end: replays this run's spool when the ledger is back; the run's id in the ledger (0 when
  /// it stays spooled for the next command).
  std::int64_t finish();
  /// True while writes go to the spool.
  bool spooling() const { return spool_ != nullptr; }

  std::string describe() const override;
  std::string backend() const override;
  Result<int> schema_version() const override;
  Result<std::int64_t> begin_run(const RunRecord& run) override;
  Result<void> update_run(const RunRecord& run) override;
  Result<void> append(const std::vector<SampleRecord>& samples, const std::vector<ProgressRecord>& progress,
                      const std::vector<ActionRecord>& actions) override;
  Result<void> append_rollups(const std::vector<RollupRecord>& rollups) override;
  Result<void> append_inference(const std::vector<InferenceRecord>& records) override;
  Result<RunRecord> run(std::int64_t id) const override;
  Result<RunRecord> last_run() const override;
  Result<std::vector<RunRecord>> runs(const RunFilter& filter) const override;
  Result<std::vector<RunSummary>> run_summaries(const RunFilter& filter) const override;
  Result<std::vector<SampleRecord>> samples(std::int64_t run_id) const override;
  Result<std::vector<ProgressRecord>> progress(std::int64_t run_id) const override;
  Result<std::vector<ActionRecord>> actions(std::int64_t run_id) const override;
  Result<std::vector<RollupRecord>> rollups(const RunFilter& filter) const override;
  Result<std::vector<InferenceRecord>> inference(std::int64_t run_id) const override;
  Result<void> append_cells(const std::vector<CellRecord>& cells) override;
  Result<std::vector<CellRecord>> cells(std::int64_t run_id) const override;
  Result<ImportOutcome> import_run(const RunBundle& bundle, const std::string& import_key,
                                   std::int64_t into_run_id) override;
  Result<void> set_budget(const BudgetRecord& budget) override;
  Result<std::vector<BudgetRecord>> budgets() const override;
  Result<void> remove_budget(const std::string& selector) override;
  Result<SelectorSpend> selector_spend(const std::string& key, const std::string& value,
                                       std::int64_t since_unix_ms,
                                       std::int64_t exclude_run_id) const override;

 private:
  Ledger& active() const;
  /// Switches to the spool after `why`; false when even the spool cannot be written.
  bool start_spool(const Error& why);
  std::int64_t local_id(std::int64_t id) const;
  template <class T>
  std::vector<T> to_local(const std::vector<T>& rows) const;
  /// `write(ledger, local)` into the ledger while it answers, else (after a failure) into the spool with the
  /// rows' run ids made local.
  template <class F>
  Result<void> write_rows(F&& write);
  template <class T>
  Result<void> append_each(Result<void> (Ledger::*write)(const std::vector<T>&), const std::vector<T>& rows);

  std::string location_;
  std::string spool_dir_;
  std::unique_ptr<Ledger> primary_;
  std::unique_ptr<Ledger> spool_;
  std::string spool_name_;  ///< file stem under spool_dir_
  int lock_fd_ = -1;
  std::optional<RunRecord> run_;  ///< the run as last written
  std::int64_t target_run_id_ = 0;
  std::int64_t spool_run_id_ = 0;
  std::vector<std::string> notes_;
};

/// Where spooled runs wait: $GPUMETER_SPOOL_DIR, else $XDG_DATA_HOME/gpumeter/spool, else ~/.local/share/...
std::string default_spool_dir();
/// Replays the finished spooled runs of `spool_dir` meant for `ledger` (idempotent; a run still being
/// spooled by a live gpumeter is left alone); returns how many were replayed now.
Result<std::size_t> replay_spool(Ledger& ledger, const std::string& spool_dir);

/// Every record of run `id` of `ledger`.
Result<RunBundle> load_bundle(const Ledger& ledger, std::int64_t id);

/// Copies every run of `from` into `to` (idempotent per source run: a copy run twice copies nothing twice)
/// and the budgets; returns the number of runs copied now.
Result<std::size_t> copy_ledger(const Ledger& from, Ledger& to);

/// The ledger's location: `flag` (--ledger), else $GPUMETER_LEDGER, else `[ledger] location` in the config
/// file (util/config.h), else Ledger::default_path(). Usage error naming an empty flag or a bad config file.
Result<std::string> ledger_location(const std::optional<std::string>& flag);
/// Opens the ledger at ledger_location(flag). Without `create`, a missing SQLite file is an error naming it
/// (kind not_found), never created. A shared (PostgreSQL) ledger first gets the runs spooled here while it
/// was unreachable; `notes` receives how many were replayed, or why none could be.
Result<std::unique_ptr<Ledger>> open_ledger(const std::optional<std::string>& flag, bool create,
                                            std::vector<std::string>& notes);

}  // namespace gm::store
