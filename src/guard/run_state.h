#pragma once
// What the Supervisor and its collaborators share about one supervised run: its record, meter, budget
// policy, forecast, the rows waiting for the ledger and the stop sequence; and the small interface every
// collaborator (one feature of a supervised run: checkpoints, notebook cells, team budgets, idle-held GPUs,
// serving counters, progress) implements. Internal to guard.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "guard/gpu_match.h"
#include "guard/notifications.h"
#include "guard/session.h"
#include "guard/target_guard.h"

namespace gm::guard {

/// The run's shared state and the actions any collaborator may take on it.
class RunState {
 public:
  RunState(const SessionConfig& config, gpu::GpuBackend* backend, store::Ledger* ledger, util::Clock& clock,
           sys::ProcessRunner& runner, SessionSink& sink);
  RunState(const RunState&) = delete;
  RunState& operator=(const RunState&) = delete;

  const SessionConfig cfg;
  gpu::StaticGpuBackend no_gpu;  ///< no devices: a run without GPU telemetry meters wall time × price
  gpu::GpuBackend* backend;
  store::Ledger* ledger;  ///< null once a write failed (the rest of the run is not recorded)
  util::Clock& clock;
  sys::ProcessRunner& runner;
  SessionSink& sink;
  BudgetGuard policy;
  meter::Forecaster forecaster;
  std::optional<meter::Forecast> forecast;
  std::optional<store::ProgressRecord> latest_progress;
  std::optional<std::string> progress_note;  ///< why the progress is ambiguous, for the status line
  bool nesting_revised = false;  ///< the nesting changed and the status line has not shown a new forecast
  std::optional<TargetGuard> target_guard;
  std::optional<meter::RunMeter> meter;
  std::optional<JobGpuMatcher> gpu_match;  ///< which allocated GPUs the job uses (guard/gpu_match.h)
  Notifications notifications;
  SessionOutcome outcome;
  store::RunRecord run;
  pid_t pid = -1;
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  std::vector<store::SampleRecord> pending_samples;
  std::vector<store::ProgressRecord> pending_progress;
  std::vector<store::ActionRecord> pending_actions;
  std::vector<store::ActionRecord> all_actions;
  bool stopping = false;
  bool killed = false;
  std::int64_t kill_deadline_ns = 0;

  MicroUsd price_micros() const { return cfg.price ? cfg.price->micros_per_gpu_hour : 0; }
  std::int64_t elapsed_ms(std::int64_t now_ns) const { return (now_ns - start_ns) / 1'000'000; }
  double seconds_since_start(std::int64_t now_ns) const {
    return static_cast<double>(now_ns - start_ns) / 1e9;
  }
  /// Spend so far: metered GPU cost, or without GPU telemetry the wall time at the price (one unit).
  MicroUsd spent(std::int64_t now_ns, bool extrapolate) const;
  /// The run's burn rate, for display and forecasts.
  double burn_usd_per_s() const;
  /// Mean utilization of the allocated GPUs' latest samples (nullopt when none is known).
  std::optional<double> mean_util() const;

  /// A problem of gpumeter's own: kept in the outcome and shown.
  void warn(const std::string& message);
  /// A ledger write failed: the rest of the run is not recorded.
  void ledger_failed(const Error& error);
  /// Records, shows and notifies an action; `spent_micros` is the figure its message quotes.
  void record_action(store::ActionKind kind, const std::string& message, std::int64_t now_ns,
                     MicroUsd spent_micros);
  /// A fact about how the run was metered, kept with its actions (the report shows it as a note): shown
  /// once, never notified.
  void record_note(store::ActionKind kind, const std::string& message, std::int64_t now_ns);
  /// An action recorded for the report only: neither shown nor notified.
  void record_quiet(store::ActionRecord action);
  /// Sends the stop signal (SIGKILL after the grace unless the signal is the whole action).
  void stop_job(const GuardDecision& decision, std::int64_t now_ns, MicroUsd spent_micros);
  /// The run record's running figures at `now_ns`.
  void update_totals(std::int64_t now_ns);
};

/// One metering interval as collaborators see it, after the budget policy decided.
struct Tick {
  std::int64_t now_ns = 0;
  MicroUsd spent_micros = 0;  ///< metered spend at this tick
  bool evaluate = true;       ///< false at the last tick, after the job ended: record, decide nothing
};

/// One feature of a supervised run. The Supervisor calls every collaborator's hooks in a fixed order;
/// events that only one feature takes (a cell, a notice, a scrape) go to that collaborator's own method.
class Collaborator {
 public:
  virtual ~Collaborator() = default;
  /// A metering interval passed.
  virtual void on_interval(const Tick& tick) { (void)tick; }
  /// The job has ended: final records and warnings, before the run's final figures and last flush.
  virtual void on_finish() {}
  /// Writes the rows it keeps for the ledger (after samples, progress and actions).
  virtual Result<void> flush(store::Ledger& ledger) {
    (void)ledger;
    return ok_result();
  }
  /// Drops the rows it keeps for the ledger (the run is not recorded).
  virtual void drop_pending() {}
  /// Its fields of the live status.
  virtual void fill(StatusSnapshot& snapshot) const { (void)snapshot; }
};

}  // namespace gm::guard
