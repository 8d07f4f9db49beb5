#pragma once
// The money to reach a target (docs/run.md "Targets"): a metric target ("loss<=2.2", "acc>=0.9"), robust
// fits of the metric's learning curve (power law with an offset, exponential, log-linear; several windows),
// and the forecast of when and at what cost the run reaches the target, with an interval from every
// plausible fit. Forecasts are doubles; money spent comes in from the meter.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "meter/run_meter.h"
#include "store/store.h"
#include "util/result.h"

namespace gm::meter {

/// A target on a progress metric: "acc=0.9" / "acc>=0.9" (reach at least), "loss<=1.8" (reach at most).
struct MetricTarget {
  std::string metric;
  bool at_most = false;  ///< true: value <= threshold; false: value >= threshold
  double threshold = 0;
  /// True when `value` meets the target.
  bool met(double value) const { return at_most ? value <= threshold : value >= threshold; }
};

/// Parses `--target` text; usage error naming the text when malformed.
Result<MetricTarget> parse_metric_target(std::string_view text);
/// "loss<=2.2", "acc>=0.9" (the form parse_metric_target reads back).
std::string format_metric_target(const MetricTarget& target);

// ---- curve fits ------------------------------------------------------------------------------

/// One observation of the metric.
struct CurvePoint {
  double step = 0;
  double value = 0;
};

enum class CurveFamily {
  power_law,    ///< a + b·(step + c)^-alpha
  exponential,  ///< a + b·e^(-k·step)
  log_linear,   ///< a + b·ln(step + c)
};
std::string_view curve_family_name(CurveFamily family);

/// A fitted curve (parameters in steps).
struct CurveFit {
  CurveFamily family = CurveFamily::power_law;
  double a = 0, b = 0, c = 0, rate = 0;  ///< rate: alpha (power law) or k (exponential); unused (log-linear)
  double from_step = 0;                  ///< the window fitted: points at or after this step
  double recent_msr = 0;                 ///< trimmed mean squared residual over the recent half of the curve
  double recent_range = 0;  ///< max − min of the values over the recent half (a scale for a noise-free curve)
  /// The fitted metric at `step`.
  double value_at(double step) const;
};

/// Robust fits of a learning curve: each family over three windows (all points, the last 2/3 and the last
/// 1/2 of the steps), each with Huber-weighted least squares over a grid of its shape parameters. Points
/// are binned (median per bin) when there are many. Empty with fewer than 4 distinct steps.
std::vector<CurveFit> fit_learning_curve(std::vector<CurvePoint> points);

/// The fits whose residual over the recent half of the curve is within kPlausibleRatio of the best one, or
/// within kPlausibleFloor of the recent range of the values (squared): a curve without noise still leaves
/// every fit that is as good as indistinguishable.
std::vector<CurveFit> plausible_fits(const std::vector<CurveFit>& fits);
inline constexpr double kPlausibleRatio = 1.6;
inline constexpr double kPlausibleFloor = 0.003;

/// The first step in (from_step, horizon_step] where `fit` meets the target (from_step itself when the fit
/// meets it there already); nullopt when it does not within the horizon. The families are monotone.
std::optional<double> step_reaching(const CurveFit& fit, const MetricTarget& target, double from_step,
                                    double horizon_step);

// ---- the forecast ----------------------------------------------------------------------------

enum class TargetVerdict {
  too_early,
  on_track,
  reached,
  unreachable_within_steps,
  unreachable_within_budget
};
/// "too_early", "on_track", "reached", "unreachable_within_steps", "unreachable_within_budget".
std::string_view verdict_name(TargetVerdict verdict);

/// Minimums before a target forecast is made: this many metric points and this fraction of the steps.
inline constexpr std::size_t kTargetMinPoints = 8;
inline constexpr double kTargetMinFraction = 0.15;
/// Without a total, the horizon of the fits is this many times the steps so far.
inline constexpr double kTargetHorizonNoTotal = 10.0;
/// Resamples of the residual bootstrap that widens the interval.
inline constexpr int kTargetBootstrap = 4;

/// What the forecast is made from, at one moment.
struct TargetInputs {
  double now_s = 0;  ///< seconds since the run's start
  std::int64_t step = 0;
  std::optional<std::int64_t> total_steps;
  /// The run's forecast from the main job's pace estimator (Forecaster::forecast); nullopt: no pace yet.
  std::optional<Forecast> pace;
  double spent_usd = 0;
  double burn_usd_per_s = 0;
  std::optional<double> budget_usd;
  bool priced = true;  ///< false: no price, no cost figures
};

/// The forecast of when and at what cost the target is reached.
struct TargetForecast {
  TargetVerdict verdict = TargetVerdict::too_early;
  std::optional<double> current_value;        ///< the recent level: median of the last 3 to 15 points
  std::int64_t step = 0;                      ///< the step it was made at
  std::optional<double> reached_at_step;      ///< central estimate (or the step where it was reached)
  std::optional<double> low_step, high_step;  ///< the interval over plausible fits; high nullopt: not reached
  std::optional<double> reached_at_s;         ///< seconds since the run's start
  std::optional<double> cost_to_reach_usd;    ///< the run's total cost when the target is reached
  std::optional<double> low_usd, high_usd;    ///< high nullopt: some plausible fit does not reach it
  std::size_t points = 0;                     ///< metric points seen
  std::size_t fits = 0;                       ///< plausible fits
  std::size_t fits_reaching = 0;              ///< of them, those reaching the target within the horizon
  std::optional<double> value_at_total;       ///< central fit's value at the planned total
  std::string why;                            ///< the evidence in words
};

/// The forecast from the metric's points (in the order reported) and the run's state; never `reached`
/// (TargetTracker decides that from the recent level).
TargetForecast forecast_target(const MetricTarget& target, const std::vector<CurvePoint>& points,
                               const TargetInputs& in);

/// One entry of a target's forecast history.
struct TargetHistoryEntry {
  double t_s = 0;
  TargetForecast forecast;
};

/// Follows a target through a run: its points, when it was first met, the forecast now and its history
/// (an entry when the verdict changes, else at most one per kTargetHistoryEvery of the steps or 30 s).
class TargetTracker {
 public:
  explicit TargetTracker(MetricTarget target) : target_(std::move(target)) {}
  /// A value of the metric at `step` (metrics without a step use the last step seen).
  void add(std::int64_t step, double value, double t_s, double spent_usd);
  /// The forecast now; appended to the history when due.
  const TargetForecast& update(const TargetInputs& in);
  const MetricTarget& target() const { return target_; }
  const std::vector<CurvePoint>& points() const { return points_; }
  const std::optional<TargetForecast>& latest() const { return latest_; }
  const std::vector<TargetHistoryEntry>& history() const { return history_; }

 private:
  MetricTarget target_;
  std::vector<CurvePoint> points_;
  struct Hit {
    double step, t_s, spent_usd;
  };
  std::optional<Hit> hit_;
  std::optional<TargetForecast> latest_;
  std::vector<TargetHistoryEntry> history_;
};
inline constexpr double kTargetHistoryEvery = 0.02;

/// Replays a stored run's progress points through a TargetTracker and a Forecaster as the live run did (one
/// update per point): `burn_usd_per_s` is the run's price × allocated GPUs; `priced` false: no cost figures.
TargetTracker replay_target(const MetricTarget& target, const std::vector<store::ProgressRecord>& progress,
                            double burn_usd_per_s, std::optional<double> budget_usd, bool priced);

}  // namespace gm::meter
