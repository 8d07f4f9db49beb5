#pragma once
// A supervised run (`gpumeter run`, `gpumeter attach`): what it is given (SessionConfig), what a person sees
// (SessionSink, StatusSnapshot), what it returns (SessionOutcome), and the drivers that start or watch the
// job and turn descriptors (job output, progress socket, signals, stdin) into the events of the Supervisor
// (guard/supervisor.h). Everything a person sees goes to a SessionSink; the library prints nothing.
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
#include "guard/control.h"
#include "guard/gpu_match.h"
#include "guard/guard.h"
#include "guard/live_mfu.h"
#include "guard/target_guard.h"
#include "meter/meter.h"
#include "meter/run_meter.h"
#include "serving/serving.h"
#include "store/store.h"
#include "sys/spawn.h"
#include "util/clock.h"

namespace gm::guard {

/// Who gets the stop signal (DESIGN §3 budget actions).
enum class StopTarget {
  main,   ///< the job's main process (default: DataLoader workers stay alive while it checkpoints)
  group,  ///< the job's whole process group
};

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
  std::optional<meter::PriceQuote> price;
  std::vector<unsigned> allocated;  ///< device indices
  bool telemetry = true;            ///< false: no GPU library, wall time × price only
  store::RunRecord run;             ///< command, user, host, labels, gpu_model, budget, total_steps
  bool simulated = false;           ///< label every status line SIMULATED
  std::int64_t sample_interval_ms = 1000;
  /// Window of the job's pty (rows, cols), already less the status line; pty mode only.
  std::optional<std::pair<unsigned short, unsigned short>> window;
  /// The engine metrics of the server the job runs (--inference-endpoint); null when it serves none.
  serving::InferenceSource* inference = nullptr;
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
  /// Accept control datagrams on the progress socket (cells, budget changes, stop requests; see
  /// parse_session_control): attach, and run (`gpumeter mcp`'s stop_run and set_budget, the node agent).
  bool control_datagrams = false;
  /// The cloud metadata service's preemption notices (--preemption); null when not watched.
  cloud::NoticeWatcher* notices = nullptr;
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
  std::optional<meter::Forecast> forecast;
  std::optional<MicroUsd> budget_left_micros;  ///< negative once overspent
  std::vector<gpu::DeviceSample> gpus;         ///< latest sample per allocated GPU
  bool stopping = false;
  std::int64_t job_pid = 0;               ///< the job's main process (attach: the watched one); 0 before
  std::int64_t run_id = 0;                ///< 0 when not recorded
  std::optional<MicroUsd> budget_micros;  ///< the budget now (attach: it can be changed while running)
  std::optional<double> idle_held_s;      ///< `idle_gpus_held`: how long the GPUs have idled with memory held
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
  virtual void action(const store::ActionRecord& action) { (void)action; }
  /// A notebook cell ended with its cost.
  virtual void cell(const store::CellRecord& cell) { (void)cell; }
};

/// The outcome of a supervised run.
struct SessionOutcome {
  int exit_code = 0;                       ///< the job's, kExitGuardStop, or 126/127 when it could not start
  std::optional<std::string> start_error;  ///< why the job could not be started
  /// What the run's report is built from (report's session_report): the final record, per-GPU usage,
  /// the latest progress point, every action, the serving counters and the notebook cells.
  store::RunRecord run;
  std::vector<meter::GpuUsage> gpus;
  std::vector<store::ProgressRecord> progress;
  std::vector<store::ActionRecord> actions;
  std::vector<store::InferenceRecord> inference;
  std::vector<store::CellRecord> cells;
  std::optional<TargetOutcome> target;  ///< --target: its forecast, history and a stop's evidence
  bool recorded = false;                ///< the ledger holds the run
  std::vector<std::string> warnings;    ///< ledger problems and the like (also given to the sink)
};

/// Runs the job to completion: spawns it through `runner`, feeds the Supervisor from the job's output,
/// the progress socket, signals and stdin (pty mode), and returns the outcome. `backend` may be null (no
/// GPU library: wall time × price). `ledger` may be null (the run is not recorded). Errors only when
/// gpumeter itself cannot set up (the progress socket); a job that cannot start is an outcome (126/127).
Result<SessionOutcome> run_session(const SessionConfig& config, gpu::GpuBackend* backend,
                                   store::Ledger* ledger, const catalog::Catalog* catalog, util::Clock& clock,
                                   sys::ProcessRunner& runner, SessionSink& sink);

/// `gpumeter attach`: meters the running process `runner` watches (config.attached) until it ends or a
/// SIGINT / SIGTERM / SIGHUP reaches gpumeter (then it detaches); the progress socket takes progress and
/// control datagrams. The run counts from config.started_ago_ms before now.
Result<SessionOutcome> attach_session(const SessionConfig& config, pid_t pid, gpu::GpuBackend* backend,
                                      store::Ledger* ledger, const catalog::Catalog* catalog,
                                      util::Clock& clock, sys::WatchedProcessRunner& runner,
                                      SessionSink& sink);

}  // namespace gm::guard
