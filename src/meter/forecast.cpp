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
      base_step_.reset();
      base_t_s_.reset();
    }
    total_ = total_steps;
  }
  if (last_step_ && step == *last_step_) return;  // a repeated report keeps the first time it was seen
  const bool backwards = last_step_ && step < *last_step_;
  last_step_ = step;
  last_t_s_ = t_s;
  if (!base_step_ || !base_t_s_ || backwards) {
    // The first report, or a step going backwards (a restarted counter): a new base without an interval.
    base_step_ = step;
    base_t_s_ = t_s;
    return;
  }
  const double dt = t_s - *base_t_s_;
  // Reports read together (several output lines in one read) carry no timing: the interval waits until
  // time has passed, over all their steps.
  if (dt < kMinIntervalS) return;
  const std::int64_t dsteps = step - *base_step_;
  base_step_ = step;
  base_t_s_ = t_s;
  report_s_.push_back(dt);
  if (report_s_.size() > kWindow) report_s_.erase(report_s_.begin());
  const bool warm_up =
      !seen_first_interval_ || (total_ && static_cast<double>(step) <= 0.02 * static_cast<double>(*total_));
  seen_first_interval_ = true;
  if (!warm_up) {
    per_step_s_.push_back({dt / static_cast<double>(dsteps), dsteps});
    if (per_step_s_.size() > kWindow) per_step_s_.erase(per_step_s_.begin());
  }
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
  // The step shown may lag the real one by up to one report interval (bars redraw at most every 0.1 s,
  // rich 4-10 times a second, logs every N steps).
  std::vector<double> reports = report_s_;
  std::nth_element(reports.begin(), reports.begin() + static_cast<std::ptrdiff_t>(reports.size() / 2),
                   reports.end());
  const double report_lag_s = reports.empty() ? 0.0 : reports[reports.size() / 2];
  // The work goes on between reports: the time since the last one counts as done, up to one report
  // interval (a longer silence is a pause, an evaluation, not progress).
  auto remaining = [&](double s_per_step) {
    if (remaining_steps == 0) return 0.0;
    return std::max(0.0, static_cast<double>(remaining_steps) * s_per_step -
                             std::min(since_last, std::max(s_per_step, report_lag_s)));
  };
  // Work left but no time per step measured (every interval instant): no forecast rather than "spent".
  if (remaining_steps > 0 && percentile(0.5) <= 0) return std::nullopt;
  Forecast f;
  f.s_per_step = percentile(0.5);
  f.remaining_s = remaining(f.s_per_step);
  f.total_usd = spent_usd + f.remaining_s * burn_usd_per_s;
  // The fast end of the interval allows for one more report interval of work already done.
  // A steady job can still change pace: the interval is at least ±kMinSpread of the remaining time.
  const double low_s = std::min(remaining(percentile(0.1)) - report_lag_s, (1 - kMinSpread) * f.remaining_s);
  const double high_s = std::max(remaining(percentile(0.9)), (1 + kMinSpread) * f.remaining_s);
  f.low_usd = spent_usd + std::max(0.0, low_s) * burn_usd_per_s;
  f.high_usd = spent_usd + high_s * burn_usd_per_s;
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
