#pragma once
// Flags and execution of `gpumeter run`, shared with `gpumeter demo`.
#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "guard/session.h"
#include "meter/meter.h"
#include "store/store.h"

namespace gm::cli {

/// The flags of `gpumeter run`.
struct RunFlags {
  PricingOptions pricing;
  std::optional<double> budget_usd;
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
};

/// The ledger a metered run writes (`run`, `attach`).
struct RunLedger {
  std::unique_ptr<Ledger> ledger;   ///< null: the run is not recorded (a warning was printed)
  SpoolingLedger* shared = nullptr; ///< a shared (PostgreSQL) ledger: spooled while unreachable
  std::optional<int> exit_code;     ///< stop now with this (a spent team budget refuses the run; printed)
  /// At the run's end: a spooled run is replayed when the ledger is back; notes on stderr.
  void finish(const char* command);
};
/// Opens the ledger of --ledger / $GPUMETER_LEDGER / the config file for a run: `--label host=` names the
/// run's host; a shared ledger spools when unreachable; the team budgets matching the run's labels refuse it
/// (spent: exit 87) or go into cfg.guard; unverifiable ones fall back to the per-run budget, said on stderr.
RunLedger open_run_ledger(const char* command, const std::optional<std::string>& flag, SessionConfig& cfg,
                          bool json_report);

/// Adds the run flags to `app`; the job's command is what follows the first word that is not one of them.
void add_run_flags(CLI::App& app, RunFlags& flags);
/// Parses `gpumeter run` flags: options end at the first word that is not one of gpumeter's options (as in
/// env, nohup, timeout) or at `--`; everything after belongs to the job. Returns an exit code to stop with.
std::optional<int> parse_run_args(CLI::App& app, RunFlags& flags, int argc, char** argv);
/// Validates the flags, runs the job and prints the report; returns the exit code. `simulated` marks every
/// line gpumeter prints with SIMULATED (the demo on a machine without a GPU).
int execute_run(const RunFlags& flags, bool simulated);

}  // namespace gm::cli
