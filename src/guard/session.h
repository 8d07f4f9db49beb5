#pragma once
// The supervisor of `gpumeter run`: starts the job, copies its output through, takes progress, meters
// every second, applies the guard (warn / stop with signal, grace, SIGKILL), records to the ledger and
// produces the run report.
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "catalog/catalog.h"
#include "guard/guard.h"
#include "meter/meter.h"
#include "report/run_report.h"
#include "store/store.h"
#include "sys/spawn.h"
#include "util/clock.h"

namespace gm {

/// Everything a supervised run needs, decided by the CLI.
struct SessionConfig {
  std::vector<std::string> argv;
  bool use_pty = false;                           ///< the job gets a pty (gpumeter's stdout is a terminal)
  bool live_status = false;                       ///< reserved bottom status line (pty mode only)
  std::optional<std::int64_t> status_every_ms;    ///< one-line summaries on stderr without a terminal
  bool quiet = false;                             ///< no action lines on stderr either
  GuardConfig guard;
  int stop_signal = 15;
  std::int64_t grace_ms = 60'000;
  std::optional<std::string> notify_command;
  std::optional<std::string> webhook_url;
  PriceQuote price;
  std::vector<unsigned> allocated;                ///< device indices
  RunRecord run;                                  ///< command, user, host, labels, gpu_model, budget, total_steps
  bool simulated = false;                         ///< label every status line SIMULATED
  std::int64_t sample_interval_ms = 1000;
};

/// The outcome of a supervised run.
struct SessionOutcome {
  int exit_code = 0;                              ///< the job's, or kExitGuardStop
  RunReport report;
  bool recorded = false;                          ///< the ledger holds the run
  std::vector<std::string> warnings;              ///< ledger problems and the like (already printed)
};

/// Runs the job to completion. `ledger` may be null (the run is not recorded; a warning was given).
/// Errors only for failures before the job started (e.g. the program cannot be executed).
Result<SessionOutcome> run_session(const SessionConfig& config, GpuBackend& backend, Ledger* ledger,
                                   const Catalog* catalog, Clock& clock, ProcessRunner& runner);

}  // namespace gm
