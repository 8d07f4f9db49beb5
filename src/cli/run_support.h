#pragma once
// Flags and execution of `gpumeter run`, shared with `gpumeter demo` and `gpumeter attach` (one place for
// the flags both take: pricing, budget, warnings, stop signal, grace, labels, ledger, notification).
#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cloud/cloud.h"
#include "guard/session.h"
#include "meter/meter.h"

namespace gm::cli {

/// The flags of `gpumeter run`.
struct RunFlags {
  meter::PricingOptions pricing;
  std::optional<std::string> budget;  ///< --budget as written; parsed to micro-dollars
  std::string warn_at = "80%";
  bool forecast_stop = false;
  std::optional<std::string> target;  ///< --target METRIC<=V|METRIC>=V
  bool target_stop = false;           ///< --target-stop
  std::optional<std::string> max_idle;
  std::string grace = "60s";
  std::string stop_signal = "TERM";
  std::string stop_to = "main";
  std::optional<std::int64_t> total_steps;
  std::vector<std::string> labels;
  std::optional<std::string> json_report;
  std::optional<std::string> ledger;
  std::optional<std::string> notify;
  std::optional<std::string> webhook;
  bool quiet = false;
  std::optional<std::string> status_every;
  std::optional<std::string> inference_endpoint;  ///< URL of the served engine's /metrics, or "auto"
  std::string preemption = "auto";                ///< auto | aws | gcp | azure | off
  std::optional<std::string> metadata_url;        ///< base URL of the metadata service
  std::string preemption_poll = "5s";             ///< interval between polls of the metadata service
  std::optional<std::string> checkpoint_glob;     ///< files whose new mtime marks a checkpoint
  std::vector<std::string> command;
  // MFU (issue 37; run_mfu.cpp):
  std::optional<std::string> model;       ///< --model NAME|PATH: FLOPs per token from the planner
  std::optional<double> flops_per_token;  ///< --flops-per-token F
  std::optional<int> seq;                 ///< --seq: context length for the attention term
  std::string precision = "bf16";         ///< --precision: whose dense peak MFU divides by
  // attach only:
  std::optional<std::int64_t> pid;  ///< the watched process
  bool json_lines = false;          ///< one JSON object per interval on stdout
  std::string from = "now";         ///< count from "now" or the process's "start"
};

/// Adds the flags `run` and `attach` share (pricing, --budget, --warn-at, --max-idle, --grace,
/// --stop-signal, --stop-to, --total-steps, --label, --json-report, --ledger, --notify, --webhook, --quiet,
/// --status-every).
void add_session_flags(CLI::App& app, RunFlags& flags);
/// Adds the run flags to `app`; the job's command is what follows the first word that is not one of them.
void add_run_flags(CLI::App& app, RunFlags& flags);

/// A metered session made ready from the flags: its configuration and what it has opened.
struct SessionSetup {
  guard::SessionConfig cfg;
  std::optional<meter::PricingContext> prices;
  std::unique_ptr<gpu::GpuBackend> backend;  ///< null without a GPU library (wall time × price)
  std::unique_ptr<store::Ledger> ledger;     ///< null when it cannot be opened (a warning was printed)
  store::SpoolingLedger* shared = nullptr;   ///< a shared (PostgreSQL) ledger: spooled while unreachable
  std::unique_ptr<serving::InferenceSource> inference;
  std::unique_ptr<cloud::NoticeWatcher>
      notices;  ///< the metadata service's watcher (--preemption); null when off
  /// At the run's end: a spooled run is replayed when the shared ledger is back; notes on stderr.
  void finish_ledger(const char* command);
};
/// Adds --model, --flops-per-token, --seq and --precision (run_mfu.cpp).
void add_mfu_flags(CLI::App& app, RunFlags& flags);
/// Fills the run's MFU basis (cfg.run.flops_per_token, mfu_basis, mfu_precision) and the allocated GPU's
/// dense peak (cfg.mfu_peak_tflops) from the flags; a usage error for a bad flag, printed, as an exit code.
std::optional<int> apply_mfu_flags(const RunFlags& flags, const catalog::GpuSpec* gpu, const char* command,
                                   guard::SessionConfig& cfg);

/// Validates the shared flags of `command` ("run" or "attach") and opens pricing, the GPU library and the
/// ledger into `out`; on a problem prints "gpumeter COMMAND: error: ..." and returns the exit code. The
/// ledger is --ledger / $GPUMETER_LEDGER / the config file's; `--label host=` names the run's host; a shared
/// ledger spools while unreachable; a team budget matching the run's labels refuses it when spent (exit 88)
/// or guards it (cfg.guard.team_budgets); one that cannot be checked falls back to --budget, said on stderr.
std::optional<int> prepare_session(const RunFlags& flags, const char* command, SessionSetup& out);
/// Parses `gpumeter run` flags: options end at the first word that is not one of gpumeter's options (as in
/// env, nohup, timeout) or at `--`; everything after belongs to the job. Returns an exit code to stop with.
std::optional<int> parse_run_args(CLI::App& app, RunFlags& flags, int argc, char** argv);
/// Applies --preemption, --metadata-url ($GPUMETER_METADATA_URL), --preemption-poll and --checkpoint-glob
/// to `cfg` (run and attach): starts the metadata watcher into `watcher` when notices are watched (auto: on
/// the cloud the instance detector finds, off elsewhere, no network call made to decide). `spot_provider`:
/// the provider of a spot price quote, if any. Returns an exit code on a usage error (message printed).
std::optional<int> setup_preemption(const RunFlags& flags, const std::optional<std::string>& spot_provider,
                                    guard::SessionConfig& cfg, std::unique_ptr<cloud::NoticeWatcher>& watcher,
                                    const char* command);
/// Validates the flags, runs the job and prints the report; returns the exit code. `simulated` marks every
/// line gpumeter prints with SIMULATED (the demo on a machine without a GPU).
int execute_run(const RunFlags& flags, bool simulated);

}  // namespace gm::cli
