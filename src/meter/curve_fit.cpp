// Robust fits of a learning curve (power law with an offset, exponential, log-linear) over several windows.
// Each family is linear in (a, b) once its shape parameters are fixed: a grid over the shape, and for each
// grid point Huber-weighted least squares (iteratively reweighted) for a and b; the best grid point wins.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "meter/median_detail.h"
#include "meter/target.h"

namespace gm::meter {
namespace {

constexpr std::size_t kMaxBins = 120;
constexpr double kHuberDelta = 1.345;

struct Linear {
  double a = 0, b = 0;
  bool ok = false;
};

/// Weighted least squares of y = a + b·g.
Linear weighted_ls(const std::vector<double>& g, const std::vector<double>& y, const std::vector<double>& w) {
  double sw = 0, sg = 0, sy = 0, sgg = 0, sgy = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    sw += w[i];
    sg += w[i] * g[i];
    sy += w[i] * y[i];
    sgg += w[i] * g[i] * g[i];
    sgy += w[i] * g[i] * y[i];
  }
  const double det = sw * sgg - sg * sg;
  if (sw <= 0 || !(std::abs(det) > 1e-300 * std::max(1.0, sw * sgg))) return {};
  Linear l;
  l.b = (sw * sgy - sg * sy) / det;
  l.a = (sy - l.b * sg) / sw;
  l.ok = std::isfinite(l.a) && std::isfinite(l.b);
  return l;
}

/// Mean of the squared residuals without the largest 10 % (a spike never decides the fit).
double trimmed_msr(std::vector<double> sq) {
  if (sq.empty()) return std::numeric_limits<double>::infinity();
  std::sort(sq.begin(), sq.end());
  const std::size_t keep = std::max<std::size_t>(1, sq.size() - sq.size() / 10);
  double s = 0;
  for (std::size_t i = 0; i < keep; ++i) s += sq[i];
  return s / static_cast<double>(keep);
}

/// Huber-weighted fit of y = a + b·g; returns the fit and its robust loss.
std::pair<Linear, double> huber_fit(const std::vector<double>& g, const std::vector<double>& y) {
  std::vector<double> w(g.size(), 1.0), r(g.size());
  Linear l = weighted_ls(g, y, w);
  if (!l.ok) return {l, std::numeric_limits<double>::infinity()};
  for (int iter = 0; iter < 4; ++iter) {
    std::vector<double> abs_r(g.size());
    for (std::size_t i = 0; i < g.size(); ++i) {
      r[i] = y[i] - l.a - l.b * g[i];
      abs_r[i] = std::abs(r[i]);
    }
    const double scale = 1.4826 * median_of(abs_r);
    if (!(scale > 0)) break;
    for (std::size_t i = 0; i < g.size(); ++i)
      w[i] = abs_r[i] <= kHuberDelta * scale ? 1.0 : kHuberDelta * scale / abs_r[i];
    Linear next = weighted_ls(g, y, w);
    if (!next.ok) break;
    l = next;
  }
  std::vector<double> sq(g.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double e = y[i] - l.a - l.b * g[i];
    sq[i] = e * e;
  }
  return {l, trimmed_msr(std::move(sq))};
}

double basis(CurveFamily family, double step, double c, double rate) {
  switch (family) {
    case CurveFamily::power_law:
      return std::pow(step + c, -rate);
    case CurveFamily::exponential:
      return std::exp(-rate * step);
    case CurveFamily::log_linear:
      return std::log(step + c);
  }
  return 0;
}

/// Sorted by step; many points binned into kMaxBins equal spans of steps (median value, mean step).
std::vector<CurvePoint> prepare(std::vector<CurvePoint> points) {
  std::erase_if(points, [](const CurvePoint& p) {
    return !std::isfinite(p.step) || !std::isfinite(p.value) || p.step < 0;
  });
  std::stable_sort(points.begin(), points.end(),
                   [](const CurvePoint& x, const CurvePoint& y) { return x.step < y.step; });
  if (points.size() <= kMaxBins) return points;
  const double lo = points.front().step, hi = points.back().step;
  const double span = (hi - lo) / static_cast<double>(kMaxBins);
  std::vector<CurvePoint> out;
  std::size_t i = 0;
  for (std::size_t bin = 0; bin < kMaxBins && i < points.size(); ++bin) {
    const double end = bin + 1 == kMaxBins ? std::numeric_limits<double>::infinity()
                                           : lo + span * static_cast<double>(bin + 1);
    std::vector<double> values;
    double step_sum = 0;
    while (i < points.size() && points[i].step < end) {
      values.push_back(points[i].value);
      step_sum += points[i].step;
      ++i;
    }
    if (!values.empty())
      out.push_back({step_sum / static_cast<double>(values.size()), median_of(std::move(values))});
  }
  return out;
}

}  // namespace

std::string_view curve_family_name(CurveFamily family) {
  constexpr std::string_view kNames[] = {"power_law", "exponential", "log_linear"};
  const auto i = static_cast<std::size_t>(family);
  return i < std::size(kNames) ? kNames[i] : "?";
}

double CurveFit::value_at(double step) const {
  return a + b * basis(family, std::max(0.0, step), c, rate);
}

std::vector<CurveFit> fit_learning_curve(std::vector<CurvePoint> input) {
  const std::vector<CurvePoint> points = prepare(std::move(input));
  std::size_t distinct = 0;
  for (std::size_t i = 0; i < points.size(); ++i)
    if (i == 0 || points[i].step != points[i - 1].step) ++distinct;
  if (distinct < 4) return {};
  const double first = points.front().step, last = points.back().step;
  const double span = std::max(1.0, last - first);
  // Shape grids, in units of the steps seen so the same grid serves 100 steps and 1,000,000.
  static constexpr std::array<double, 14> kAlpha{0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
                                                 0.65, 0.8, 1.0,  1.3, 1.7, 2.2, 3.0};
  static constexpr std::array<double, 6> kOffset{0.0, 0.01, 0.03, 0.1, 0.3, 1.0};  // × last step
  static constexpr std::array<double, 14> kRate{0.1, 0.2, 0.35, 0.5, 0.75, 1.0,  1.5,
                                                2.0, 3.0, 4.0,  6.0, 9.0,  14.0, 20.0};  // ÷ last step
  const double scale = std::max(1.0, last);
  const double recent_from = first + span / 2;
  double recent_lo = std::numeric_limits<double>::infinity(), recent_hi = -recent_lo;
  for (const auto& p : points)
    if (p.step >= recent_from) {
      recent_lo = std::min(recent_lo, p.value);
      recent_hi = std::max(recent_hi, p.value);
    }
  const double recent_range = recent_hi >= recent_lo ? recent_hi - recent_lo : 0;
  std::vector<CurveFit> out;
  for (double window : {0.0, 1.0 / 3.0, 0.5}) {
    const double from = first + span * window;
    std::vector<double> steps, y;
    for (const auto& p : points)
      if (p.step >= from) {
        steps.push_back(p.step);
        y.push_back(p.value);
      }
    if (steps.size() < (window == 0.0 ? 4u : 6u)) continue;
    for (CurveFamily family : {CurveFamily::power_law, CurveFamily::exponential, CurveFamily::log_linear}) {
      std::optional<CurveFit> best;
      double best_loss = std::numeric_limits<double>::infinity();
      auto consider = [&](double c, double rate) {
        std::vector<double> g(steps.size());
        for (std::size_t i = 0; i < steps.size(); ++i) {
          g[i] = basis(family, steps[i], c, rate);
          if (!std::isfinite(g[i])) return;
        }
        auto [l, loss] = huber_fit(g, y);
        if (!l.ok || !(loss < best_loss)) return;
        best_loss = loss;
        best = CurveFit{family, l.a, l.b, c, rate, from, 0, 0};
      };
      if (family == CurveFamily::power_law) {
        for (double alpha : kAlpha)
          for (double off : kOffset) consider(std::max(1.0, off * scale), alpha);
      } else if (family == CurveFamily::exponential) {
        for (double k : kRate) consider(0, k / scale);
      } else {
        for (double off : kOffset) consider(std::max(1.0, off * scale), 0);
      }
      if (!best) continue;
      // Refine the best grid point: a pattern search over its shape parameters in log space, the step
      // halved when no move improves, so a curve between grid points is still fitted exactly.
      {
        double log_c = std::log(std::max(1.0, best->c)), log_rate = std::log(std::max(1e-12, best->rate));
        double d_c = std::log(3.0), d_rate = std::log(1.25);
        const bool has_c = family != CurveFamily::exponential, has_rate = family != CurveFamily::log_linear;
        const double max_log_c = std::log(10 * scale);
        for (int iter = 0; iter < 24 && (d_c > 1e-3 || d_rate > 1e-3); ++iter) {
          const double before = best_loss;
          const double c0 = log_c, r0 = log_rate;
          for (int dim = 0; dim < 2; ++dim) {
            if ((dim == 0 && !has_c) || (dim == 1 && !has_rate)) continue;
            for (double sign : {-1.0, 1.0}) {
              const double lc = dim == 0 ? std::clamp(c0 + sign * d_c, 0.0, max_log_c) : log_c;
              const double lr = dim == 1 ? r0 + sign * d_rate : log_rate;
              consider(std::exp(lc), has_rate ? std::exp(lr) : 0);
              if (best_loss < before) {
                log_c = std::log(std::max(1.0, best->c));
                if (has_rate) log_rate = std::log(best->rate);
              }
            }
          }
          if (!(best_loss < before)) {
            d_c /= 2;
            d_rate /= 2;
          }
        }
      }
      std::vector<double> sq;
      for (const auto& p : points)
        if (p.step >= recent_from) {
          const double e = p.value - best->value_at(p.step);
          sq.push_back(e * e);
        }
      best->recent_msr = trimmed_msr(std::move(sq));
      best->recent_range = recent_range;
      if (std::isfinite(best->recent_msr)) out.push_back(*best);
    }
  }
  return out;
}

std::vector<CurveFit> plausible_fits(const std::vector<CurveFit>& fits) {
  double best = std::numeric_limits<double>::infinity();
  for (const auto& f : fits) best = std::min(best, f.recent_msr);
  std::vector<CurveFit> out;
  for (const auto& f : fits)
    if (f.recent_msr <=
        kPlausibleRatio * best + kPlausibleFloor * kPlausibleFloor * f.recent_range * f.recent_range)
      out.push_back(f);
  return out;
}

std::optional<double> step_reaching(const CurveFit& fit, const MetricTarget& target, double from_step,
                                    double horizon_step) {
  if (fit.family == CurveFamily::log_linear && fit.c <= 0 && from_step <= 0) from_step = 1;
  if (target.met(fit.value_at(from_step))) return from_step;
  if (!(horizon_step > from_step) || !target.met(fit.value_at(horizon_step))) return std::nullopt;
  double lo = from_step, hi = horizon_step;  // not met at lo, met at hi; the families are monotone
  for (int i = 0; i < 80 && hi - lo > 0.5; ++i) {
    const double mid = (lo + hi) / 2;
    (target.met(fit.value_at(mid)) ? hi : lo) = mid;
  }
  return hi;
}

}  // namespace gm::meter
