// The forecast of a run's total cost from its step progress (guard uses it live, reports replay it).
// Progress may arrive in bursts: a job whose CPU runs ahead of its GPU reports k steps a few milliseconds
// apart, then waits at a synchronisation for the GPU to catch up. Intervals between consecutive reports then
// measure the CPU's launch rate, not the job's pace; a slope over a window spanning several bursts does not.
#include <algorithm>
#include <cmath>

#include "meter/run_meter.h"

namespace gm::meter {
namespace {

/// The p-quantile (0..1) of `v` (reordered), by rank.
double quantile(std::vector<double>& v, double p) {
  const auto k = static_cast<std::size_t>(std::llround(p * static_cast<double>(v.size() - 1)));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

}  // namespace

void Forecaster::add(double t_s, std::int64_t step, std::optional<std::int64_t> total_steps) {
  if (total_steps && *total_steps > 0) {
    // A new total means the unit of a step changed (nested bars discovered): start over, keep no interval.
    if (total_ && *total_ != *total_steps) *this = Forecaster();
    total_ = total_steps;
  }
  if (last_step_ && step == *last_step_) return;  // a repeated report keeps the first time it was seen
  const bool backwards = last_step_ && step < *last_step_;
  const double gap_s = last_t_s_ ? std::max(0.0, t_s - *last_t_s_) : 0.0;
  last_step_ = step;
  last_t_s_ = t_s;
  if (!base_step_ || !base_t_s_ || backwards) {
    // The first report, or a step going backwards (a restarted counter): a new base without an interval,
    // and no slope across the restart.
    base_step_ = step;
    base_t_s_ = t_s;
    if (backwards) points_.clear();
    return;
  }
  const bool warm_up =
      !seen_first_interval_ || (total_ && static_cast<double>(step) <= 0.02 * static_cast<double>(*total_));
  if (!warm_up) {
    if (!points_.empty()) {
      gaps_s_.push_back({std::max(0.0, t_s - points_.back().t_s), t_s});
      if (gaps_s_.size() > kMaxGaps) gaps_s_.erase(gaps_s_.begin());
    }
    points_.push_back({t_s, step, gap_s});
    if (points_.size() > kMaxPoints) {
      // Thin the history by half, evenly, keeping the newest report.
      std::vector<Point> kept;
      kept.reserve(points_.size() / 2 + 1);
      for (std::size_t i = points_.size() % 2 == 0 ? 1 : 0; i < points_.size(); i += 2)
        kept.push_back(points_[i]);
      points_ = std::move(kept);
    }
  }
  const double dt = t_s - *base_t_s_;
  // Reports read together (several output lines in one read) carry no timing: the interval waits until
  // time has passed, over all their steps.
  if (dt < kMinIntervalS) return;
  base_step_ = step;
  base_t_s_ = t_s;
  if (seen_first_interval_ && !warm_up) ++intervals_;
  if (!seen_first_interval_) {
    // The first interval is the start-up (compilation, autotuning, data-loader warm-up): the report that
    // closes it is the first usable one.
    seen_first_interval_ = true;
    if (!total_ || static_cast<double>(step) > 0.02 * static_cast<double>(*total_))
      points_.push_back({t_s, step, gap_s});
  }
}

double Forecaster::gap_scale_s(double since_s) const {
  // The time-weighted 95th percentile of the gaps between reports: the gap that 95 % of the time is spent in
  // gaps no longer than. With bursts it is the pause between them; with steady reports, their spacing.
  std::vector<double> gaps;
  for (const auto& [gap_s, t_s] : gaps_s_)
    if (t_s >= since_s) gaps.push_back(gap_s);
  std::sort(gaps.begin(), gaps.end());
  double sum = 0;
  for (double g : gaps) sum += g;
  if (sum <= 0) return 0;
  double cum = 0;
  for (double g : gaps) {
    cum += g;
    if (cum >= 0.95 * sum) return g;
  }
  return gaps.back();
}

std::optional<Forecaster::Pace> Forecaster::pace() const {
  if (intervals_ < kMinIntervals || points_.size() < 2) return std::nullopt;
  Pace p{};
  const double t_last = points_.back().t_s;
  // The gap scale of the recent past (of all the gaps kept first, then of the window they give): a pace that
  // changed has its own.
  p.gap_s = gap_scale_s(t_last - std::max(kMinWindowS, kWindowGaps * gap_scale_s(-1.0)));
  // Not before the usable reports span two bursts: one burst's steps alone tell the CPU's pace.
  if (t_last - points_.front().t_s < kMinSpanGaps * p.gap_s) return std::nullopt;
  const double window_s = std::max(kMinWindowS, kWindowGaps * p.gap_s);
  auto first = std::lower_bound(points_.begin(), points_.end(), t_last - window_s,
                                [](const Point& a, double t) { return a.t_s < t; });
  const auto n = static_cast<std::size_t>(points_.end() - first);
  if (n < 2) first = points_.end() - 2;
  std::vector<Point> all(first, points_.end());
  // Bursts: the reports that follow a pause (a gap of at least a third of the gap scale) are the heads of the
  // bursts, all at the same phase of the GPU's work. When they are a minority the slope is fitted through
  // them alone, over at least the last kMinHeads of them (bursts can be longer than the window). Before there
  // are three (two whole bursts between them) there is no forecast early in the run; later, fewer than three
  // long gaps are pauses (a stall, an evaluation), not bursts, and every report is used.
  const auto is_head = [&](const Point& pt) { return pt.gap_s >= p.gap_s / 3; };
  if (2 * static_cast<std::size_t>(std::count_if(all.begin(), all.end(), is_head)) <= all.size()) {
    std::vector<Point> heads;
    for (const auto& pt : points_)
      if (is_head(pt)) heads.push_back(pt);
    if (heads.size() >= 3) {
      const double start_s =
          std::min(all.front().t_s, heads[heads.size() - std::min(kMinHeads, heads.size())].t_s);
      all.clear();
      for (const auto& pt : heads)
        if (pt.t_s >= start_s) all.push_back(pt);
    } else if (t_last - points_.front().t_s < 2 * kMinWindowS) {
      return std::nullopt;
    }
  }
  // At most kMaxFitPoints, evenly by index, the newest always in.
  const std::size_t stride = (all.size() + kMaxFitPoints - 1) / kMaxFitPoints;
  for (std::size_t i = (all.size() - 1) % stride; i < all.size(); i += stride) p.window.push_back(all[i]);
  // Theil–Sen over pairs at least half the window apart: each pair spans whole bursts up to the phases of
  // its two ends, and those phase errors are symmetric about zero, so the median slope is the pace.
  const double min_sep_s = (p.window.back().t_s - p.window.front().t_s) / 2;
  std::vector<double> slopes;
  for (std::size_t i = 0; i < p.window.size(); ++i)
    for (std::size_t j = i + 1; j < p.window.size(); ++j) {
      const double dt = p.window[j].t_s - p.window[i].t_s;
      const std::int64_t ds = p.window[j].step - p.window[i].step;
      if (dt >= min_sep_s && ds > 0) slopes.push_back(dt / static_cast<double>(ds));
    }
  if (slopes.empty()) return std::nullopt;
  p.mid = quantile(slopes, 0.5);
  p.low = quantile(slopes, 0.1);
  p.high = quantile(slopes, 0.9);
  return p;
}

std::optional<double> Forecaster::s_per_step() const {
  const auto p = pace();
  if (!p || p->mid <= 0) return std::nullopt;
  return p->mid;
}

std::optional<Forecast> Forecaster::forecast(double now_s, double spent_usd, double burn_usd_per_s) const {
  if (!total_ || !last_step_) return std::nullopt;
  const auto p = pace();
  if (!p) return std::nullopt;
  const std::int64_t remaining_steps = std::max<std::int64_t>(0, *total_ - *last_step_);
  // Work left but no time per step measured (every report at one instant): no forecast rather than "spent".
  if (remaining_steps > 0 && p->mid <= 0) return std::nullopt;
  // The time left at pace `s_per_step`, from the line of that slope through the window's reports at offset
  // quantile `q` (0: the earliest reports for their step, 1: the latest). A report ahead of the line (the CPU
  // launched steps the GPU has not done) adds time; time since the line's position at the last step counts as
  // done, up to one gap scale (a longer silence is a pause, an evaluation, not progress).
  auto remaining = [&](double s_per_step, double q) {
    if (remaining_steps == 0) return 0.0;
    std::vector<double> offsets;
    offsets.reserve(p->window.size());
    for (const auto& pt : p->window) offsets.push_back(pt.t_s - static_cast<double>(pt.step) * s_per_step);
    const double line_at_last = quantile(offsets, q) + static_cast<double>(*last_step_) * s_per_step;
    const double credit = std::min(now_s - line_at_last, std::max(s_per_step, p->gap_s));
    return std::max(0.0, static_cast<double>(remaining_steps) * s_per_step - credit);
  };
  Forecast f;
  f.s_per_step = p->mid;
  f.remaining_s = remaining(p->mid, 0.5);
  f.total_usd = spent_usd + f.remaining_s * burn_usd_per_s;
  // A steady job can still change pace: the interval is at least ±kMinSpread of the remaining time.
  // The step shown may lag the real one by up to one report interval (bars redraw at most every 0.1 s, rich
  // 4-10 times a second, logs every N steps): the fast end allows for the median one over the window.
  std::vector<double> report_gaps;
  for (const auto& [gap_s, t_s] : gaps_s_)
    if (t_s >= p->window.front().t_s) report_gaps.push_back(gap_s);
  const double report_lag_s = report_gaps.empty() ? 0.0 : quantile(report_gaps, 0.5);
  const double low_s = std::min(remaining(p->low, 0.0) - report_lag_s, (1 - kMinSpread) * f.remaining_s);
  const double high_s = std::max(remaining(p->high, 1.0), (1 + kMinSpread) * f.remaining_s);
  f.low_usd = spent_usd + std::max(0.0, low_s) * burn_usd_per_s;
  f.high_usd = spent_usd + high_s * burn_usd_per_s;
  // Never narrower than the spend: low >= spent, and with work left the upper end is above it.
  f.low_usd = std::max(f.low_usd, spent_usd);
  f.total_usd = std::max(f.total_usd, f.low_usd);
  f.high_usd = std::max(f.high_usd, f.total_usd);
  if (remaining_steps > 0 && f.high_usd <= spent_usd) f.high_usd = spent_usd + p->high * burn_usd_per_s;
  f.step = *last_step_;
  f.total_steps = *total_;
  return f;
}

}  // namespace gm::meter
