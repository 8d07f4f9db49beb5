// The forecast of a run's total cost from its step progress (guard uses it live, reports replay it).
#include <algorithm>
#include <cmath>

#include "meter/run_meter.h"

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
    report_s_.push_back(std::max(0.0, dt));
    if (report_s_.size() > kWindow) report_s_.erase(report_s_.begin());
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
  // Work left but no time per step measured (every interval instant): no forecast rather than "spent".
  if (remaining_steps > 0 && percentile(0.5) <= 0) return std::nullopt;
  Forecast f;
  f.s_per_step = percentile(0.5);
  f.remaining_s = remaining(f.s_per_step);
  f.total_usd = spent_usd + f.remaining_s * burn_usd_per_s;
  // The step shown may lag the real one by up to one report interval (bars redraw at most every 0.1 s,
  // logs every N steps): the fast end of the interval allows for that much work already done.
  std::vector<double> reports = report_s_;
  std::nth_element(reports.begin(), reports.begin() + static_cast<std::ptrdiff_t>(reports.size() / 2),
                   reports.end());
  const double report_lag_s = reports.empty() ? 0.0 : reports[reports.size() / 2];
  f.low_usd = spent_usd + std::max(0.0, remaining(percentile(0.1)) - report_lag_s) * burn_usd_per_s;
  f.high_usd = spent_usd + remaining(percentile(0.9)) * burn_usd_per_s;
  // Never narrower than the spend: low >= spent, and with work left the upper end is above it.
  f.low_usd = std::max(f.low_usd, spent_usd);
  f.total_usd = std::max(f.total_usd, f.low_usd);
  f.high_usd = std::max(f.high_usd, f.total_usd);
  if (remaining_steps > 0 && f.high_usd <= spent_usd)
    f.high_usd = spent_usd + percentile(0.9) * burn_usd_per_s;
  f.step = *last_step_;
  f.total_steps = *total_;
  return f;
}

}  // namespace gm
