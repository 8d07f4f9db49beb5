// The money to reach a target in a run's report and on its page (docs/run.md "Targets").
#include "report/detail/target_render.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "report/run_report.h"
#include "util/units.h"

namespace gm::report {

std::optional<guard::TargetOutcome> replay_run_target(const store::RunRecord& run,
                                                      const std::vector<store::ProgressRecord>& progress,
                                                      const std::vector<store::ActionRecord>& actions) {
  const auto settings = guard::target_of_actions(actions);
  if (!settings) return std::nullopt;
  const bool priced = run.price_micros_per_gpu_hour > 0;
  const double burn = meter::burn_usd_per_s(run.price_micros_per_gpu_hour,
                                            std::max<std::size_t>(1, run.gpus_allocated.size()));
  std::optional<double> budget;
  if (run.budget_micros) budget = util::micros_to_usd(*run.budget_micros);
  const meter::TargetTracker tracker = meter::replay_target(settings->target, progress, burn, budget, priced);
  guard::TargetOutcome o;
  o.target = settings->target;
  o.stop_enabled = settings->stop;
  if (tracker.latest()) o.forecast = *tracker.latest();
  o.history = tracker.history();
  o.points = tracker.points();
  for (const auto& a : actions)
    if (a.kind == store::ActionKind::stop_target) o.stop_evidence = a.message;
  return o;
}

namespace detail {
namespace {
nlohmann::json opt(const std::optional<double>& v) {
  return v && std::isfinite(*v) ? nlohmann::json(*v) : nlohmann::json(nullptr);
}
nlohmann::json step_json(const std::optional<double>& v) {
  return v ? nlohmann::json(static_cast<std::int64_t>(std::llround(*v))) : nlohmann::json(nullptr);
}
}  // namespace

nlohmann::json target_json(const guard::TargetOutcome& t) {
  const meter::TargetForecast& f = t.forecast;
  nlohmann::json j;
  j["metric"] = t.target.metric;
  j["op"] = t.target.at_most ? "<=" : ">=";
  j["value"] = t.target.threshold;
  j["verdict"] = std::string(meter::verdict_name(f.verdict));
  j["current_value"] = opt(f.current_value);
  j["reached_at_step"] = step_json(f.reached_at_step);
  j["reached_at_s"] = opt(f.reached_at_s);
  j["cost_to_reach_usd"] = opt(f.cost_to_reach_usd);
  j["low_usd"] = opt(f.low_usd);
  j["high_usd"] = opt(f.high_usd);
  j["low_step"] = step_json(f.low_step);
  j["high_step"] = step_json(f.high_step);
  j["points"] = f.points;
  j["plausible_fits"] = f.fits;
  j["fits_reaching"] = f.fits_reaching;
  j["why"] = f.why;
  j["stop_enabled"] = t.stop_enabled;
  j["stop_evidence"] = t.stop_evidence ? nlohmann::json(*t.stop_evidence) : nlohmann::json(nullptr);
  auto history = nlohmann::json::array();
  for (const auto& h : t.history)
    history.push_back({{"t_s", h.t_s},
                       {"step", h.forecast.step},
                       {"value", opt(h.forecast.current_value)},
                       {"verdict", std::string(meter::verdict_name(h.forecast.verdict))},
                       {"reached_at_step", step_json(h.forecast.reached_at_step)},
                       {"cost_to_reach_usd", opt(h.forecast.cost_to_reach_usd)},
                       {"low_usd", opt(h.forecast.low_usd)},
                       {"high_usd", opt(h.forecast.high_usd)}});
  j["forecast_history"] = history;
  return j;
}

std::string target_text(const guard::TargetOutcome& t) {
  std::string o =
      fmt::format("  target          {}\n", guard::describe_target_forecast(t.target, t.forecast));
  if (t.stop_evidence) o += fmt::format("  target stop     {}\n", *t.stop_evidence);
  return o;
}

std::optional<nlohmann::json> target_chart(const meter::MetricTarget& target,
                                           const std::vector<meter::CurvePoint>& points,
                                           std::optional<std::int64_t> horizon_step) {
  if (points.empty()) return std::nullopt;
  double last = 0;
  for (const auto& p : points) last = std::max(last, p.step);
  const double horizon = std::max(last, horizon_step ? static_cast<double>(*horizon_step) : last);
  const auto fits = meter::plausible_fits(meter::fit_learning_curve(points));
  const meter::CurveFit* best = nullptr;
  for (const auto& f : fits)
    if (!best || f.recent_msr < best->recent_msr) best = &f;
  // The x axis: every observed step and a grid out to the horizon for the fits.
  std::set<double> xs;
  for (const auto& p : points) xs.insert(p.step);
  constexpr int kGrid = 80;
  const double first = points.front().step;
  if (best)
    for (int i = 0; i <= kGrid; ++i) xs.insert(first + (horizon - first) * i / kGrid);
  std::vector<double> x(xs.begin(), xs.end());
  std::vector<nlohmann::json> observed(x.size(), nullptr), fit(x.size(), nullptr), low(x.size(), nullptr),
      high(x.size(), nullptr), line(x.size(), target.threshold);
  for (const auto& p : points) {
    const auto i = static_cast<std::size_t>(std::lower_bound(x.begin(), x.end(), p.step) - x.begin());
    observed[i] = p.value;  // several values at one step: the last
  }
  if (best)
    for (std::size_t i = 0; i < x.size(); ++i) {
      if (x[i] < best->from_step) continue;
      double lo = best->value_at(x[i]), hi = lo;
      for (const auto& f : fits) {
        lo = std::min(lo, f.value_at(x[i]));
        hi = std::max(hi, f.value_at(x[i]));
      }
      fit[i] = best->value_at(x[i]);
      low[i] = lo;
      high[i] = hi;
    }
  nlohmann::json series = nlohmann::json::array();
  series.push_back({{"label", target.metric}, {"values", observed}, {"points_only", true}});
  if (best) {
    series.push_back(
        {{"label", fmt::format("fit ({})", meter::curve_family_name(best->family))}, {"values", fit}});
    series.push_back({{"label", "fits_low"}, {"values", low}});
    series.push_back({{"label", "fits_high"}, {"values", high}});
  }
  series.push_back(
      {{"label", "target " + meter::format_metric_target(target)}, {"values", line}, {"dash", true}});
  nlohmann::json chart = {
      {"id", "target"},
      {"title", "Target " + meter::format_metric_target(target) + ": the metric, its fits and the target"},
      {"kind", "line"},
      {"x_label", "step"},
      {"y_label", target.metric},
      {"x", x},
      {"series", series}};
  if (best) chart["band"] = {{"upper", "fits_high"}, {"lower", "fits_low"}};
  return chart;
}

}  // namespace detail
}  // namespace gm::report
