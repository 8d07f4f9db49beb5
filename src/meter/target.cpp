// The forecast of when and at what cost a run reaches a metric target (docs/run.md "Targets").
#include "meter/target.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <random>

#include "meter/median_detail.h"
#include "util/units.h"

namespace gm::meter {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

/// The first step of the longer fitting windows of `fits` (not empty): the central estimate comes from the
/// fits that start at or before it (the second window start of three or more, else the last).
double longest_windows_from(const std::vector<CurveFit>& fits) {
  std::vector<double> froms;
  for (const auto& fit : fits) froms.push_back(fit.from_step);
  std::sort(froms.begin(), froms.end());
  froms.erase(std::unique(froms.begin(), froms.end()), froms.end());
  return froms.size() >= 3 ? froms[1] : froms.back();
}

/// The metric now: the median of its last points (3, up to 15 when it is reported often), so one noisy
/// point is neither the level nor the target reached.
double recent_level(const std::vector<CurvePoint>& points) {
  const std::size_t k = std::clamp<std::size_t>(points.size() / 20, 3, 15);
  std::vector<double> last;
  for (std::size_t i = points.size() > k ? points.size() - k : 0; i < points.size(); ++i)
    last.push_back(points[i].value);
  return median_of(std::move(last));
}

std::string steps_text(double step) {
  return fmt::format("{:.0f}", std::round(step));
}

}  // namespace

Result<MetricTarget> parse_metric_target(std::string_view text) {
  const std::string original(text);
  auto bad = [&](const std::string& why) {
    return make_error(ErrorKind::usage,
                      "--target '" + original + "': " + why +
                          " (expected METRIC=VALUE, METRIC>=VALUE or METRIC<=VALUE, e.g. acc=0.9)");
  };
  MetricTarget t;
  std::size_t op = text.find_first_of("<>=");
  if (op == std::string_view::npos) return bad("no '=' in it");
  std::string_view name = util::trim(text.substr(0, op));
  std::string_view rest = text.substr(op);
  if (rest.starts_with("<=")) {
    t.at_most = true;
    rest.remove_prefix(2);
  } else if (rest.starts_with(">=")) {
    rest.remove_prefix(2);
  } else if (rest.starts_with("=")) {
    rest.remove_prefix(1);
  } else {
    return bad("use '=', '>=' or '<='");
  }
  if (name.empty()) return bad("no metric name");
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-' || c == '/'))
      return bad("metric name has '" + std::string(1, c) + "'");
  rest = util::trim(rest);
  if (rest.empty()) return bad("no value");
  std::string value_text(rest);
  bool negative = false;
  if (value_text.front() == '-') {
    negative = true;
    value_text.erase(0, 1);
  }
  auto value = util::parse_number(value_text);
  if (!value) return bad("value '" + std::string(rest) + "' is not a number");
  t.metric = std::string(name);
  t.threshold = negative ? -*value : *value;
  return t;
}

std::string format_metric_target(const MetricTarget& target) {
  return fmt::format("{}{}{:g}", target.metric, target.at_most ? "<=" : ">=", target.threshold);
}

std::string_view verdict_name(TargetVerdict verdict) {
  switch (verdict) {
    case TargetVerdict::too_early:
      return "too_early";
    case TargetVerdict::on_track:
      return "on_track";
    case TargetVerdict::reached:
      return "reached";
    case TargetVerdict::unreachable_within_steps:
      return "unreachable_within_steps";
    case TargetVerdict::unreachable_within_budget:
      return "unreachable_within_budget";
  }
  return "?";
}

TargetForecast forecast_target(const MetricTarget& target, const std::vector<CurvePoint>& points,
                               const TargetInputs& in) {
  TargetForecast f;
  f.step = in.step;
  f.points = points.size();
  if (!points.empty()) f.current_value = recent_level(points);
  double last_step = static_cast<double>(in.step);
  for (const auto& p : points) last_step = std::max(last_step, p.step);
  if (points.size() < kTargetMinPoints) {
    f.why = fmt::format("{} point(s) of {} so far; a forecast needs {}", points.size(), target.metric,
                        kTargetMinPoints);
    return f;
  }
  if (in.total_steps && last_step < kTargetMinFraction * static_cast<double>(*in.total_steps)) {
    f.why = fmt::format("step {} of {}: a forecast needs {:.0f}% of the steps", steps_text(last_step),
                        *in.total_steps, 100 * kTargetMinFraction);
    return f;
  }
  const std::vector<CurveFit> fits = plausible_fits(fit_learning_curve(points));
  if (fits.empty()) {
    f.why = fmt::format("the points of {} do not span 4 distinct steps yet", target.metric);
    return f;
  }
  f.fits = fits.size();
  const double horizon = in.total_steps ? static_cast<double>(*in.total_steps)
                                        : kTargetHorizonNoTotal * std::max(1.0, last_step);
  // The level of the curve is known to about ±2 standard errors of its recent points: the interval
  // solves each plausible fit for the target moved that far both ways.
  const CurveFit* best = &fits.front();
  for (const auto& fit : fits)
    if (fit.recent_msr < best->recent_msr) best = &fit;
  std::size_t recent_n = 0;
  const double recent_from = points.empty() ? 0 : last_step - (last_step - points.front().step) / 2;
  for (const auto& p : points) recent_n += p.step >= recent_from;
  const double shift =
      2 * std::sqrt(best->recent_msr) / std::sqrt(static_cast<double>(std::max<std::size_t>(1, recent_n)));
  MetricTarget easier = target, harder = target;
  easier.threshold += target.at_most ? shift : -shift;
  harder.threshold += target.at_most ? -shift : shift;
  std::vector<double> central;
  const double longest_window_from = longest_windows_from(fits);
  double low = kInf, high = 0;
  for (const auto& fit : fits) {
    const auto s = step_reaching(fit, target, last_step, horizon);
    // The central estimate comes from the fits over the longer windows (the most points); the last half's
    // fits only widen the interval.
    if (fit.from_step <= longest_window_from) central.push_back(s.value_or(kInf));
    if (s) ++f.fits_reaching;
    if (const auto lo = step_reaching(fit, easier, last_step, horizon)) low = std::min(low, *lo);
    const auto hi = step_reaching(fit, harder, last_step, horizon);
    high = std::max(high, hi.value_or(kInf));
  }
  // With an even count the lower middle: "unreachable" needs more than half of the fits to say so.
  std::sort(central.begin(), central.end());
  const double reach = central.empty() ? kInf : central[(central.size() - 1) / 2];
  // A residual bootstrap: the closest fit plus the observed residuals drawn again, refitted; the central
  // estimate of each resample widens the interval by how much the noise alone moves the answer.
  {
    std::vector<double> residuals;
    for (const auto& p : points) residuals.push_back(p.value - best->value_at(p.step));
    std::mt19937 rng(static_cast<unsigned>(points.size()));
    std::uniform_int_distribution<std::size_t> pick(0, residuals.size() - 1);
    for (int b = 0; b < kTargetBootstrap; ++b) {
      std::vector<CurvePoint> resample = points;
      for (auto& p : resample) p.value = best->value_at(p.step) + residuals[pick(rng)];
      const auto refits = plausible_fits(fit_learning_curve(resample));
      if (refits.empty()) continue;
      const double from_longest = longest_windows_from(refits);
      std::vector<double> steps;
      for (const auto& fit : refits)
        if (fit.from_step <= from_longest)
          steps.push_back(step_reaching(fit, target, last_step, horizon).value_or(kInf));
      if (steps.empty()) continue;
      const double r = median_of(steps);
      low = std::min(low, r);
      high = std::max(high, r);
    }
  }
  f.value_at_total = best->value_at(horizon);
  const std::string within = in.total_steps
                                 ? fmt::format("the planned {} steps", *in.total_steps)
                                 : fmt::format("{} steps ({:g}× the steps so far; the total is unknown)",
                                               steps_text(horizon), kTargetHorizonNoTotal);
  f.why = fmt::format(
      "{} of {} plausible fits of {} reach {} within {}; the closest fit ({}) gives {:.4g} at "
      "step {}",
      f.fits_reaching, f.fits, target.metric, format_metric_target(target), within,
      curve_family_name(best->family), *f.value_at_total, steps_text(horizon));
  if (low < kInf) f.low_step = low;
  if (high < kInf) f.high_step = high;
  if (!(reach < kInf)) {
    f.verdict = TargetVerdict::unreachable_within_steps;
    return f;
  }
  f.verdict = TargetVerdict::on_track;
  f.reached_at_step = reach;
  if (!in.pace || !(in.pace->s_per_step > 0)) {
    f.why += "; no pace measured yet: no time or cost";
    return f;
  }
  const double sps = in.pace->s_per_step;
  const double from = static_cast<double>(in.step);
  // The pace's own uncertainty: the run forecast's interval relative to its remaining cost.
  double low_factor = 1, high_factor = 1;
  const double rest = in.pace->total_usd - in.spent_usd;
  if (rest > 0) {
    low_factor = std::clamp((in.pace->low_usd - in.spent_usd) / rest, 0.5, 1.0);
    high_factor = std::clamp((in.pace->high_usd - in.spent_usd) / rest, 1.0, 2.0);
  }
  f.reached_at_s = in.now_s + std::max(0.0, reach - from) * sps;
  if (!in.priced) return f;
  auto cost_at = [&](double step, double factor) {
    return in.spent_usd + std::max(0.0, step - from) * sps * factor * in.burn_usd_per_s;
  };
  f.cost_to_reach_usd = cost_at(reach, 1.0);
  f.low_usd = cost_at(f.low_step.value_or(reach), low_factor);
  if (f.high_step) f.high_usd = cost_at(*f.high_step, high_factor);
  if (in.budget_usd && *f.cost_to_reach_usd > *in.budget_usd) {
    f.verdict = TargetVerdict::unreachable_within_budget;
    f.why += fmt::format("; at {} the run would have cost {} of its {} budget", steps_text(reach),
                         util::format_usd(*f.cost_to_reach_usd), util::format_usd(*in.budget_usd));
  }
  return f;
}

void TargetTracker::add(std::int64_t step, double value, double t_s, double spent_usd) {
  if (!std::isfinite(value)) return;
  points_.push_back({static_cast<double>(step), value});
  if (hit_) return;
  // Met on the recent level: one noisy point past the target is not the target.
  if (target_.met(recent_level(points_))) hit_ = Hit{static_cast<double>(step), t_s, spent_usd};
}

const TargetForecast& TargetTracker::update(const TargetInputs& in) {
  TargetForecast f;
  if (hit_) {
    f.verdict = TargetVerdict::reached;
    f.step = in.step;
    f.points = points_.size();
    f.reached_at_step = hit_->step;
    f.low_step = f.high_step = hit_->step;
    f.reached_at_s = hit_->t_s;
    if (in.priced) f.cost_to_reach_usd = f.low_usd = f.high_usd = hit_->spent_usd;
    f.current_value = recent_level(points_);
    f.why = fmt::format("{} reached {} at step {} (the median of its recent points)", target_.metric,
                        format_metric_target(target_), steps_text(hit_->step));
  } else {
    f = forecast_target(target_, points_, in);
  }
  const bool changed = !latest_ || latest_->verdict != f.verdict;
  bool due = changed;
  if (!due && !history_.empty() && history_.size() < 1000) {
    const auto& prev = history_.back();
    if (in.total_steps)
      due = static_cast<double>(in.step - prev.forecast.step) >=
            kTargetHistoryEvery * static_cast<double>(*in.total_steps);
    else
      due = in.now_s - prev.t_s >= 30;
  }
  if (due) history_.push_back({in.now_s, f});
  latest_ = std::move(f);
  return *latest_;
}

TargetTracker replay_target(const MetricTarget& target, const std::vector<store::ProgressRecord>& progress,
                            double burn_usd_per_s, std::optional<double> budget_usd, bool priced) {
  std::vector<const store::ProgressRecord*> sorted;
  for (const auto& p : progress) sorted.push_back(&p);
  std::stable_sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->t_ms < b->t_ms; });
  TargetTracker tracker(target);
  Forecaster pace;
  std::int64_t step = 0;
  std::optional<std::int64_t> total;
  std::optional<double> last_value;
  std::optional<std::int64_t> updated_step;
  double updated_s = 0;
  for (const auto* p : sorted) {
    const double t_s = static_cast<double>(p->t_ms) / 1000.0;
    const double spent = util::micros_to_usd(p->cost_micros);
    if (p->total_steps) total = p->total_steps;
    if (p->step) {
      step = *p->step;
      pace.add(t_s, step, p->total_steps);
    }
    // A stored point repeats the last value of every metric: only a new value (or a new step) is a point.
    if (auto it = p->metrics.find(target.metric); it != p->metrics.end()) {
      const bool fresh = !last_value || *last_value != it->second;
      if (fresh) tracker.add(step, it->second, t_s, spent);
      last_value = it->second;
    }
    // One forecast per 1 % of the steps (or 10 s without a total) and at the last point: a replay of a long
    // run costs a hundred fits, not one per stored second.
    const bool last = p == sorted.back();
    if (!last && updated_step &&
        (total ? static_cast<double>(step - *updated_step) < 0.01 * static_cast<double>(*total)
               : t_s - updated_s < 10))
      continue;
    updated_step = step;
    updated_s = t_s;
    TargetInputs in;
    in.now_s = t_s;
    in.step = step;
    in.total_steps = total;
    in.pace = pace.forecast(t_s, spent, burn_usd_per_s);
    in.spent_usd = spent;
    in.burn_usd_per_s = burn_usd_per_s;
    in.budget_usd = budget_usd;
    in.priced = priced;
    tracker.update(in);
  }
  return tracker;
}

}  // namespace gm::meter
