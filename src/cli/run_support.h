#pragma once
// Flags and execution of `gpumeter run`, shared with `gpumeter demo` and `gpumeter attach` (one place for
// the flags both take: pricing, budget, warnings, stop signal, grace, labels, ledger, notification).
#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "guard/session.h"
#include "meter/meter.h"

namespace gm::cli {

/// The flags of `gpumeter run`.
struct RunFlags {
  PricingOptions pricing;
  std::optional<std::string> budget;  ///< --budget as written; parsed to micro-dollars
  std::string warn_at = "80%";
  bool forecast_stop = false;
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
  std::vector<std::string> command;
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
  SessionConfig cfg;
  std::optional<PricingContext> prices;
  std::unique_ptr<GpuBackend> backend;  ///< null without a GPU library (wall time × price)
  std::unique_ptr<Ledger> ledger;       ///< null when it cannot be opened (a warning was printed)
  std::unique_ptr<InferenceSource> inference;
};
/// Validates the shared flags of `command` ("run" or "attach") and opens pricing, the GPU library and the
/// ledger into `out`; on a problem prints "gpumeter COMMAND: error: ..." and returns the exit code.
std::optional<int> prepare_session(const RunFlags& flags, const char* command, SessionSetup& out);
/// Parses `gpumeter run` flags: options end at the first word that is not one of gpumeter's options (as in
/// env, nohup, timeout) or at `--`; everything after belongs to the job. Returns an exit code to stop with.
std::optional<int> parse_run_args(CLI::App& app, RunFlags& flags, int argc, char** argv);
/// Validates the flags, runs the job and prints the report; returns the exit code. `simulated` marks every
/// line gpumeter prints with SIMULATED (the demo on a machine without a GPU).
int execute_run(const RunFlags& flags, bool simulated);

}  // namespace gm::cli
