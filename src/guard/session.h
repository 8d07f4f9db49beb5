#pragma once
// The supervisor of `gpumeter run`, in two parts: `Supervisor`, a state machine without file descriptors
// that consumes events (tick, progress, job output, signal, child exit), meters, applies the guard, records
// to the ledger and acts on the job through the ProcessRunner seam; and `run_session`, the driver that
// starts the job and turns descriptors (job output, progress socket, signals, stdin) into those events.
// Everything a person sees goes to a SessionSink (the CLI's terminal renderer); the library prints nothing.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "catalog/catalog.h"
#include "cloud/cloud.h"
#include "guard/gpu_match.h"
#include "guard/guard.h"
#include "guard/target_guard.h"
#include "meter/meter.h"
#include "meter/run_meter.h"
#include "store/store.h"
#include "sys/spawn.h"
#include "util/clock.h"

namespace gm {

/// Who gets the stop signal (DESIGN §3 budget actions).
enum class StopTarget {
  main,   ///< the job's main process (default: DataLoader workers stay alive while it checkpoints)
  group,  ///< the job's whole process group
};

/// Cumulative counters of one model as a serving engine reports them; nullopt where it has no such metric.
struct ServedCounts {
  std::optional<double> prompt_tokens;
  std::optional<double> generated_tokens;
  std::optional<double> cached_tokens;
  std::optional<double> requests;
};

/// One scrape of the engine metrics of the server a run wraps.
struct InferenceScrape {
  std::string endpoint;                        ///< the URL scraped ("" while none is known yet)
  std::string engine;                          ///< vllm | sglang | tgi | triton; "" when the scrape failed
  std::map<std::string, ServedCounts> models;  ///< by model name
  std::optional<double> start_time_s;          ///< process_start_time_seconds (restarts)
  std::string error;                           ///< why it failed ("" on success)
};

/// Where `gpumeter run --inference-endpoint` reads the wrapped server's engine metrics. Implementations
/// scrape in the background (the driver never waits on the network); the driver asks at every tick.
class InferenceSource {
 public:
  virtual ~InferenceSource() = default;
  /// The newest scrape finished since the last call (nullopt: none). `job_pids` are the job's processes
  /// now (for discovering the port the job listens on).
  virtual std::optional<InferenceScrape> take(const std::set<std::uint32_t>& job_pids) = 0;
};

/// The InferenceSource of `gpumeter run --inference-endpoint`: a background thread scrapes the engine's
/// /metrics every `interval_ms` (each scrape bounded by min(2 s, interval)). `url` "auto" finds the
/// endpoint: the TCP ports the job's processes listen on are probed (each once per 10 s until one answers)
/// for a /metrics that parses as a known engine (src/agent discovery). Usage error naming the flag for a bad
/// URL.
Result<std::unique_ptr<InferenceSource>> make_engine_inference_source(const std::string& url,
                                                                      std::int64_t interval_ms);

/// A team budget and what the runs of its selector spent this period.
struct TeamBudgetStatus {
  TeamBudget budget;
  MicroUsd spent_micros = 0;
  std::int64_t runs = 0;
  std::int64_t live_runs = 0;
};
/// Every budget of `ledger` with its spend this period (periods at `now_unix_ms`, UTC).
Result<std::vector<TeamBudgetStatus>> team_budget_statuses(const Ledger& ledger, std::int64_t now_unix_ms);
/// The budgets of `ledger` whose selector matches `run` (its labels, user or host), with their spend now.
Result<std::vector<TeamBudgetStatus>> team_budgets_matching(const Ledger& ledger, const RunRecord& run,
                                                            std::int64_t now_unix_ms);

/// Everything a supervised run needs, decided by the CLI.
struct SessionConfig {
  std::vector<std::string> argv;
  bool use_pty = false;                         ///< the job gets a pty (gpumeter's stdout is a terminal)
  std::optional<std::int64_t> status_every_ms;  ///< one-line summaries without a terminal
  GuardConfig guard;
  int stop_signal = 15;
  StopTarget stop_to = StopTarget::main;
  std::int64_t grace_ms = 60'000;
  std::optional<std::string> notify_command;
  std::optional<std::string> webhook_url;
  /// The price; nullopt when none is known (no GPU and no --price): the run records time only.
  std::optional<PriceQuote> price;
  std::vector<unsigned> allocated;  ///< device indices
  bool telemetry = true;            ///< false: no GPU library, wall time × price only
  RunRecord run;                    ///< command, user, host, labels, gpu_model, budget, total_steps
  bool simulated = false;           ///< label every status line SIMULATED
  std::int64_t sample_interval_ms = 1000;
  /// Window of the job's pty (rows, cols), already less the status line; pty mode only.
  std::optional<std::pair<unsigned short, unsigned short>> window;
  /// The engine metrics of the server the job runs (--inference-endpoint); null when it serves none.
  InferenceSource* inference = nullptr;
  // `gpumeter attach` (a process gpumeter did not start):
  /// The job is not gpumeter's child: no exit status (the run ends "finished", or "detached" when gpumeter
  /// was told to stop watching), and gpumeter's exit code is 0 unless it stopped the job.
  bool attached = false;
  /// false: the stop signal is the whole stop action, never SIGKILL after the grace period (a notebook
  /// kernel interrupted by SIGINT must survive with its variables).
  bool kill_after_grace = true;
  /// The run counts from this long before begin() (attach: the process's start), billed at the price.
  std::int64_t started_ago_ms = 0;
  /// Record an `idle_gpus_held` action when every allocated GPU is under kIdleUtilPct this long while a
  /// process of the job holds memory on one (no action is taken); nullopt: never.
  std::optional<std::int64_t> idle_held_ms;
  /// Accept control datagrams on the progress socket (cells, budget changes; see parse_session_control).
  bool control_datagrams = false;
  /// The cloud metadata service's preemption notices (--preemption); null when not watched.
  NoticeWatcher* notices = nullptr;
  /// --checkpoint-glob: a file matching it under `checkpoint_dir` with a newer mtime is a checkpoint.
  std::optional<std::string> checkpoint_glob;
  std::string checkpoint_dir = ".";
  /// How long the job may go without a checkpoint before the no_recent_checkpoint warning: the Young/Daly
  /// interval of its spot capacity; nullopt: no such warning (not spot, no notices watched).
  std::optional<std::int64_t> checkpoint_interval_ms;
  /// --target (and --target-stop): the money to reach a metric target; nullopt: none.
  std::optional<TargetSettings> target;
  /// How the job's GPUs are told (by PID; by device file where NVML's PIDs are another namespace's).
  GpuMatchConfig gpu_match;
  /// Dense peak TFLOPS of one allocated GPU at the run's MFU precision (run.mfu_precision); nullopt: no MFU.
  std::optional<double> mfu_peak_tflops;
};

/// Default threshold of the idle_gpus_held finding of `gpumeter attach` (its --max-idle).
inline constexpr std::int64_t kDefaultIdleHeldMs = 30 * 60'000;

/// A notebook cell as the IPython extension reports it on the progress socket.
struct CellEvent {
  std::int64_t cell_id = 0;  ///< the kernel's execution count (or the extension's own counter)
  bool start = false;        ///< true: the cell starts; false: it ended
  std::string status;        ///< at the end: ok | error | interrupted | refused
  std::string source;        ///< the cell's first line, at most 200 bytes
};

/// A control datagram of an attached session.
struct SessionControl {
  std::optional<CellEvent> cell;
  std::optional<MicroUsd> budget_micros;           ///< a new budget (a stop latched earlier is released)
  std::optional<std::vector<double>> warn_at_pct;  ///< new warning percentages
};

/// Parses `{"cell": {"id": 3, "event": "start"|"end", "status": "ok", "source": "…"}}` or
/// `{"control": {"budget_usd": 0.5, "warn_at": "80%"}}`; nullopt for any other datagram (progress),
/// usage error for a malformed one of these kinds.
std::optional<Result<SessionControl>> parse_session_control(std::string_view datagram);

/// Before the provider's deadline, the SIGKILL of a preempted job comes this much earlier.
inline constexpr std::int64_t kPreemptionKillMarginMs = 5'000;

/// What the live status shows, rendered by the sink.
struct StatusSnapshot {
  bool simulated = false;
  bool telemetry = true;
  double elapsed_s = 0;
  std::optional<MicroUsd> spent_micros;  ///< nullopt without a price
  std::optional<double> burn_usd_per_h;  ///< a rate for display
  std::optional<std::int64_t> step;
  std::optional<std::int64_t> total_steps;
  /// Why the progress is ambiguous ("total unknown", "progress nesting revised: forecast restarts").
  std::optional<std::string> progress_note;
  std::optional<Forecast> forecast;
  std::optional<MicroUsd> budget_left_micros;  ///< negative once overspent
  std::vector<DeviceSample> gpus;  ///< latest sample per allocated GPU
  bool stopping = false;
  std::int64_t run_id = 0;            ///< 0 when not recorded
  std::optional<MicroUsd> budget_micros;  ///< the budget now (attach: it can be changed while running)
  std::optional<double> idle_held_s;  ///< `idle_gpus_held`: how long the GPUs have idled with memory held
  std::optional<double> idle_held_usd_per_h;  ///< what they cost meanwhile
  std::optional<MicroUsd> idle_cost_micros;   ///< Σ interval cost × (1 − utilization) on used GPUs so far
  /// Serving (--inference-endpoint), over the last kServingWindowMs: spend ÷ tokens or requests.
  std::optional<double> usd_per_1m_generated_tokens;
  std::optional<double> usd_per_1k_requests;
  std::optional<double> generated_tokens_per_s;
  std::optional<TargetStatus> target;  ///< --target: the forecast to reach it
  /// Model FLOPs utilisation so far (ratio; needs tokens, FLOPs per token and the GPU's peak).
  std::optional<double> mfu;
};

/// mfu_basis of a run whose FLOPs per token came from the job's client.
inline constexpr const char* kClientFlopsBasis = "client: progress(flops_per_token=...)";

/// The client's FLOPs per token (`progress(..., flops_per_token=F)`) becomes the run's MFU basis unless the
/// command line gave one (--model / --flops-per-token win: the user said so).
void adopt_client_flops(RunRecord& run, const ProgressUpdate& update);
/// MFU of a run so far: its tokens × FLOPs per token ÷ (peak × allocated GPUs × the time after its GPUs
/// first worked); nullopt before they worked or without tokens, FLOPs per token or a peak.
std::optional<double> live_mfu(const RunRecord& run, const std::optional<ProgressRecord>& latest,
                               const std::vector<GpuUsage>& gpus, std::optional<double> peak_tflops,
                               std::size_t allocated, double elapsed_s);

/// Window of the live serving figures of the status line.
inline constexpr std::int64_t kServingWindowMs = 60'000;

/// Which output stream of the job bytes came from.
enum class JobStream { out, err };

/// Where a run shows itself: the job's output, gpumeter's messages and the live status. Implemented by the
/// CLI (terminal, pipes); calls come from the supervising thread only.
class SessionSink {
 public:
  virtual ~SessionSink() = default;
  /// The job has started (a terminal sink enters raw mode and reserves its status line now).
  virtual void job_started() {}
  /// Bytes the job wrote (pty mode: all on `out`).
  virtual void job_output(JobStream stream, std::string_view bytes) = 0;
  /// An action line ("[stop_budget] spent …") or, with `warning`, a problem of gpumeter's own.
  virtual void message(const std::string& text, bool warning) = 0;
  /// The live status at every tick; `periodic` when a --status-every line is due.
  virtual void status(const StatusSnapshot& snapshot, bool periodic) = 0;
  /// gpumeter's terminal was resized: the job's new pty window (rows, cols), if it has one.
  virtual std::optional<std::pair<unsigned short, unsigned short>> resized() { return std::nullopt; }
  /// The run has begun: its ledger id (0: not recorded), progress socket and start time.
  virtual void session_started(std::int64_t run_id, const std::string& socket_path,
                               std::int64_t start_unix_ms) {
    (void)run_id, (void)socket_path, (void)start_unix_ms;
  }
  /// An action was recorded (also shown through message()).
  virtual void action(const ActionRecord& action) { (void)action; }
  /// A notebook cell ended with its cost.
  virtual void cell(const CellRecord& cell) { (void)cell; }
};

/// The outcome of a supervised run.
struct SessionOutcome {
  int exit_code = 0;                       ///< the job's, kExitGuardStop, or 126/127 when it could not start
  std::optional<std::string> start_error;  ///< why the job could not be started
  /// What the run's report is built from (report's session_report): the final record, per-GPU usage,
  /// the latest progress point, every action, the serving counters and the notebook cells.
  RunRecord run;
  std::vector<GpuUsage> gpus;
  std::vector<ProgressRecord> progress;
  std::vector<ActionRecord> actions;
  std::vector<InferenceRecord> inference;
  std::vector<CellRecord> cells;
  std::optional<TargetOutcome> target;  ///< --target: its forecast, history and a stop's evidence
  bool recorded = false;              ///< the ledger holds the run
  std::vector<std::string> warnings;  ///< ledger problems and the like (also given to the sink)
};

/// The supervisor state machine (no descriptors): the driver, or a test, feeds it events in time order.
class Supervisor {
 public:
  Supervisor(const SessionConfig& config, GpuBackend* backend, Ledger* ledger, const Catalog* catalog,
             Clock& clock, ProcessRunner& runner, SessionSink& sink);
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  /// Opens the run (ledger row) now; call before the job starts. Returns the run id (0 when not recorded).
  std::int64_t begin();
  /// The job could not be started (`error.kind` not_found: 127, else 126); the run is recorded as failed.
  void start_failed(const Error& error);
  /// The job started with this main process (also its process group id).
  void started(pid_t pid);
  /// A progress datagram arrived (or failed to parse).
  void on_datagram(std::string_view datagram);
  /// The job wrote output: passed to the sink and scanned for progress.
  void on_output(JobStream stream, std::string_view bytes);
  /// A signal reached gpumeter (INT, TERM, HUP, QUIT): forwarded to the job like a stop.
  void on_signal(int sig);
  /// Time passed: samples when a tick is due, SIGKILLs after the grace period. Call at next_wake_ns().
  void on_time();
  /// A scrape of the wrapped server's engine metrics arrived (folded into the run's counters at the tick).
  void on_inference(const InferenceScrape& scrape);
  /// The metadata service gave a notice: a stop notice sends the stop signal at once (SIGKILL after the
  /// grace or kPreemptionKillMarginMs before the deadline, whichever first) and the run ends "preempted";
  /// a warning is recorded and notified.
  void on_notice(const CloudNotice& notice);
  /// The job's main process exited with this wait status.
  void on_exit(int wait_status);
  /// attach: gpumeter stops watching a job that still runs (SIGINT / SIGTERM to gpumeter).
  void on_detach();
  /// When on_time must run next (monotonic ns).
  std::int64_t next_wake_ns() const;
  /// True once the job has exited.
  bool done() const { return exited_; }
  /// Final figures, ledger row and report; call once after on_exit.
  SessionOutcome finish();
  /// The status now.
  StatusSnapshot snapshot() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  bool exited_ = false;
};

/// Runs the job to completion: spawns it through `runner`, feeds the Supervisor from the job's output,
/// the progress socket, signals and stdin (pty mode), and returns the outcome. `backend` may be null (no
/// GPU library: wall time × price). `ledger` may be null (the run is not recorded). Errors only when
/// gpumeter itself cannot set up (the progress socket); a job that cannot start is an outcome (126/127).
Result<SessionOutcome> run_session(const SessionConfig& config, GpuBackend* backend, Ledger* ledger,
                                   const Catalog* catalog, Clock& clock, ProcessRunner& runner,
                                   SessionSink& sink);

/// `gpumeter attach`: meters the running process `runner` watches (config.attached) until it ends or a
/// SIGINT / SIGTERM / SIGHUP reaches gpumeter (then it detaches); the progress socket takes progress and
/// control datagrams. The run counts from config.started_ago_ms before now.
Result<SessionOutcome> attach_session(const SessionConfig& config, pid_t pid, GpuBackend* backend,
                                      Ledger* ledger, const Catalog* catalog, Clock& clock,
                                      WatchedProcessRunner& runner, SessionSink& sink);

}  // namespace gm
