#pragma once
// The target of `gpumeter run|attach --target METRIC<=V|METRIC>=V` (docs/run.md "Targets"): a collaborator
// the supervisor feeds with progress and ticks. It follows the metric through meter's TargetTracker, turns
// each first verdict into an action, and with --target-stop decides a graceful stop when the target is
// forecast unreachable within the planned steps or the budget (the minimums of --forecast-stop first).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "guard/guard.h"
#include "meter/target.h"
#include "store/store.h"

namespace gm::guard {

/// --target and --target-stop.
struct TargetSettings {
  meter::MetricTarget target;
  bool stop = false;
};

/// What the status line shows of the target.
struct TargetStatus {
  meter::MetricTarget target;
  meter::TargetForecast forecast;
};

/// A run's target as the report shows it: the latest forecast, its history and the stop's evidence.
struct TargetOutcome {
  meter::MetricTarget target;
  bool stop_enabled = false;
  meter::TargetForecast forecast;
  std::vector<meter::TargetHistoryEntry> history;
  std::vector<meter::CurvePoint> points;     ///< the metric's points (step, value)
  std::optional<std::string> stop_evidence;  ///< why --target-stop stopped the run
};

/// Follows one target through a supervised run.
class TargetGuard {
 public:
  TargetGuard(TargetSettings settings, const GuardConfig& guard)
      : settings_(std::move(settings)),
        tracker_(settings_.target),
        min_elapsed_ms_(guard.forecast_min_elapsed_ms),
        min_intervals_(guard.forecast_min_intervals) {}
  /// A progress update at `t_s` (seconds since the start) with the run's spend then; `step` is the global
  /// step after it (metrics without a step count at the last one).
  void on_progress(const ProgressUpdate& update, std::optional<std::int64_t> step, double t_s,
                   double spent_usd);
  /// True when `update` carries a value of the target's metric that the ledger should keep as a point of
  /// its own (at most kTargetPointsPerSecond a second), so `report RUN` replays the same curve.
  bool keeps(const ProgressUpdate& update, std::int64_t t_ms);
  /// The forecast at a tick; returns the actions to record (a first verdict, a stop with stopped_by
  /// "target"). `spent_micros` is the figure their messages quote; `forecast_intervals` the pace's.
  std::vector<GuardDecision> tick(const meter::TargetInputs& in, std::int64_t elapsed_ms,
                                  std::size_t forecast_intervals, MicroUsd spent_micros);
  /// For the status line (nullopt before the first tick).
  std::optional<TargetStatus> status() const;
  /// For the report.
  TargetOutcome outcome() const;

 private:
  TargetSettings settings_;
  meter::TargetTracker tracker_;
  std::int64_t min_elapsed_ms_;
  std::size_t min_intervals_;
  std::int64_t last_step_ = 0;
  std::vector<meter::TargetVerdict> announced_;
  std::optional<std::string> stop_evidence_;
  std::int64_t kept_second_ = -1;
  int kept_in_second_ = 0;
  bool last_kept_ = false;
};

/// Points of the target's metric the ledger keeps per second (others: one progress point a second).
inline constexpr int kTargetPointsPerSecond = 10;

/// The forecast's inputs at a tick of the supervisor: the latest progress point, the run's forecast (the
/// pace of the main job's estimator, Forecaster::forecast), spend, burn rate and budget.
meter::TargetInputs target_inputs(double now_s, const std::optional<store::ProgressRecord>& latest,
                                  const std::optional<meter::Forecast>& pace, MicroUsd spent_micros,
                                  double burn_usd_per_s, std::optional<MicroUsd> budget_micros, bool priced);

/// The ledger's note of a run's target (action kind "target_set", message "loss<=2.2" or
/// "loss<=2.2 --target-stop"): `report RUN` replays the target from it and the stored progress.
store::ActionRecord target_set_action(std::int64_t run_id, const TargetSettings& settings);
/// The target a run's actions name (the first "target_set"); nullopt when none or unreadable.
std::optional<TargetSettings> target_of_actions(const std::vector<store::ActionRecord>& actions);

/// The stop evidence and first verdicts recorded as actions, in words: "loss<=2.2: on track, …".
std::string describe_target_forecast(const meter::MetricTarget& target,
                                     const meter::TargetForecast& forecast);

}  // namespace gm::guard
