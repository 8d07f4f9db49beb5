#pragma once
// The agent's view of the runs on its node (docs/agent.md "Runs"): each `gpumeter run|attach` publishes a
// small JSON file of its live state in a shared directory (`$GPUMETER_RUNS_DIR`, else /run/gpumeter/runs
// when it exists) and withdraws it when it ends; the agent reads the directory at each collection and
// keeps only runs whose meter is alive and whose file is fresh, so runs that ended drop out.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "meter/target.h"
#include "util/money.h"
#include "util/result.h"

namespace gm::agent {

/// A run's --target and its forecast now.
struct RunTargetView {
  meter::MetricTarget target;
  meter::TargetForecast forecast;
};

/// A run's cost forecast now (meter::Forecast's figures).
struct RunForecastView {
  double total_usd = 0;
  double low_usd = 0;
  double high_usd = 0;
  double remaining_s = 0;  ///< the time left, median estimate (the ETA)
};

/// What a run publishes of itself.
struct RunView {
  std::int64_t run_id = 0;     ///< the ledger's id; 0 when the run is not recorded
  std::int64_t meter_pid = 0;  ///< the gpumeter process metering it (names the file)
  std::int64_t job_pid = 0;    ///< the job's main process (attach: the watched process); 0 before it started
  std::int64_t start_unix_ms = 0;
  std::int64_t updated_unix_ms = 0;
  std::string command;  ///< as the ledger records it
  /// The run's progress socket, which also takes control datagrams (stop, budget: guard/control.h) from its
  /// user and root; "" when it has none.
  std::string socket;
  bool stopping = false;                ///< the stop signal was sent (budget, forecast, idle, mcp, ...)
  std::optional<MicroUsd> cost_micros;  ///< spent so far; nullopt without a price
  std::optional<double> usd_per_hour;   ///< the burn rate now
  std::optional<MicroUsd> budget_micros;
  std::optional<std::int64_t> steps, total_steps;
  std::optional<RunForecastView> forecast;
  std::string user;       ///< read by the agent from the file's owner, never from its content
  std::uint32_t uid = 0;  ///< the file's owner (read with `user`)
  std::optional<RunTargetView> target;
};

/// A view older than this (a meter that hangs or a file left by a meter whose PID was reused) is ignored.
inline constexpr std::int64_t kRunViewStaleMs = 30'000;
/// At most this many runs are read (label cardinality stays bounded); larger files are skipped.
inline constexpr std::size_t kRunViewMaxRuns = 256;
inline constexpr std::size_t kRunViewMaxBytes = 64 * 1024;

/// `$GPUMETER_RUNS_DIR` when set, else "/run/gpumeter/runs".
std::string default_runs_dir();
/// The view's file: DIR/run-PID.json.
std::string run_view_path(const std::string& dir, std::int64_t meter_pid);

/// The file's JSON (no user: the agent takes it from the file's owner).
std::string run_view_json(const RunView& view);
/// Parses a view's JSON; error naming `file_name` when malformed.
Result<RunView> parse_run_view(std::string_view text, const std::string& file_name);

/// Writes the view atomically (a temporary file renamed over the old one, mode 0644); error naming the file.
Result<void> publish_run_view(const std::string& dir, const RunView& view);
/// Removes the run's file (nothing when absent).
void withdraw_run_view(const std::string& dir, std::int64_t meter_pid);

/// The views in `dir` now: fresh (updated within kRunViewStaleMs of `now_unix_ms`), of a live meter
/// (`meter_alive(pid)`), parseable; sorted by meter PID. A missing directory has none.
std::vector<RunView> read_run_views(const std::string& dir, std::int64_t now_unix_ms,
                                    const std::function<bool(std::int64_t)>& meter_alive);
/// True when a process with this PID exists (kill(pid, 0) succeeds or is refused for permission).
bool process_alive(std::int64_t pid);

}  // namespace gm::agent
