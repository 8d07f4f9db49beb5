// Forecaster and budget policy.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "guard/guard.h"
#include "util/units.h"

namespace gm {

void Forecaster::add(double t_s, std::int64_t step, std::optional<std::int64_t> total_steps) {
  if (total_steps && *total_steps > 0) {
    // A new total means the unit of a step changed (nested bars discovered): start over, keep no interval.
    if (total_ && *total_ != *total_steps) {
      per_step_s_.clear();
      seen_first_interval_ = false;
      last_step_.reset();
      last_t_s_.reset();
    }
    total_ = total_steps;
  }
  if (last_step_ && step == *last_step_) return;  // a repeated report keeps the first time it was seen
  if (last_step_ && step > *last_step_ && last_t_s_) {
    const double dt = t_s - *last_t_s_;
    const std::int64_t dsteps = step - *last_step_;
    const bool warm_up =
        !seen_first_interval_ || (total_ && static_cast<double>(step) <= 0.02 * static_cast<double>(*total_));
    seen_first_interval_ = true;
    if (!warm_up && dt >= 0) {
      per_step_s_.push_back({dt / static_cast<double>(dsteps), dsteps});
      if (per_step_s_.size() > kWindow) per_step_s_.erase(per_step_s_.begin());
    }
  }
  // A step going backwards (a restarted counter) starts a new base without an interval.
  last_step_ = step;
  last_t_s_ = t_s;
}

std::optional<Forecast> Forecaster::forecast(double now_s, double spent_usd, double burn_usd_per_s) const {
  if (!total_ || !last_step_ || !last_t_s_ || per_step_s_.size() < kMinIntervals) return std::nullopt;
  std::vector<Interval> sorted = per_step_s_;
  std::sort(sorted.begin(), sorted.end(),
            [](const Interval& a, const Interval& b) { return a.s_per_step < b.s_per_step; });
  double weight = 0;
  for (const auto& i : sorted) weight += static_cast<double>(i.steps);
  auto percentile = [&](double p) {
    double cum = 0;
    for (const auto& i : sorted) {
      cum += static_cast<double>(i.steps);
      if (cum >= p * weight) return i.s_per_step;
    }
    return sorted.back().s_per_step;
  };
  const std::int64_t remaining_steps = std::max<std::int64_t>(0, *total_ - *last_step_);
  const double since_last = std::max(0.0, now_s - *last_t_s_);
  auto remaining = [&](double s_per_step) {
    if (remaining_steps == 0) return 0.0;
    return std::max(0.0,
                    static_cast<double>(remaining_steps) * s_per_step - std::min(since_last, s_per_step));
  };
  Forecast f;
  f.s_per_step = percentile(0.5);
  f.remaining_s = remaining(f.s_per_step);
  f.total_usd = spent_usd + f.remaining_s * burn_usd_per_s;
  f.low_usd = spent_usd + remaining(percentile(0.1)) * burn_usd_per_s;
  f.high_usd = spent_usd + remaining(percentile(0.9)) * burn_usd_per_s;
  f.step = *last_step_;
  f.total_steps = *total_;
  return f;
}

std::vector<GuardDecision> BudgetGuard::evaluate(const GuardInput& in) {
  std::vector<GuardDecision> out;
  if (!config_.budget_usd && !config_.max_idle_ms) return out;
  const double spent = micros_to_usd(in.spent_micros);
  if (config_.budget_usd) {
    const double budget = *config_.budget_usd;
    warned_.resize(config_.warn_at_pct.size(), false);
    for (std::size_t i = 0; i < config_.warn_at_pct.size(); ++i) {
      const double pct = config_.warn_at_pct[i];
      if (warned_[i] || pct >= 100.0) continue;
      if (in.spent_micros >= usd_to_micros(budget * pct / 100.0)) {
        warned_[i] = true;
        out.push_back({"warn", "",
                       fmt::format("spent {} of the {} budget ({:g}% threshold)", format_usd(spent),
                                   format_usd(budget), pct)});
      }
    }
  }
  if (stopped_) return out;
  if (config_.budget_usd && in.spent_micros >= usd_to_micros(*config_.budget_usd)) {
    stopped_ = true;
    out.push_back({"stop_budget", "budget",
                   fmt::format("spent {} — the {} budget is reached", format_usd(spent),
                               format_usd(*config_.budget_usd))});
    return out;
  }
  if (config_.forecast_stop && config_.budget_usd && in.forecast &&
      in.elapsed_ms >= config_.forecast_min_elapsed_ms &&
      in.forecast_intervals >= config_.forecast_min_intervals && in.forecast->low_usd > *config_.budget_usd) {
    stopped_ = true;
    out.push_back({"stop_forecast", "forecast",
                   fmt::format("forecast {} (at least {}) exceeds the {} budget at step {}/{}; spent {}",
                               format_usd(in.forecast->total_usd), format_usd(in.forecast->low_usd),
                               format_usd(*config_.budget_usd), in.forecast->step, in.forecast->total_steps,
                               format_usd(spent))});
    return out;
  }
  if (config_.max_idle_ms && in.idle_for_ms && *in.idle_for_ms >= *config_.max_idle_ms) {
    stopped_ = true;
    out.push_back(
        {"stop_idle", "idle",
         fmt::format("every allocated GPU under {:g}% utilization for {}; spent {}", kIdleUtilPct,
                     format_duration_s(static_cast<double>(*in.idle_for_ms) / 1000.0), format_usd(spent))});
  }
  return out;
}

Result<std::vector<double>> parse_warn_at(std::string_view text) {
  std::vector<double> out;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    std::size_t comma = text.find(',', pos);
    if (comma == std::string_view::npos) comma = text.size();
    const std::string_view item = trim(text.substr(pos, comma - pos));
    auto pct = parse_percent(item);
    if (!pct || *pct <= 0.0)
      return make_error(ErrorKind::usage,
                        fmt::format("--warn-at: '{}' is not a percentage in (0%, 100%]", item));
    out.push_back(*pct);
    pos = comma + 1;
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace gm
