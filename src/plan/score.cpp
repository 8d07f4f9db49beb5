// Weighted score over price, performance, memory headroom, spot risk and carbon.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "plan/plan.h"
#include "util/units.h"

namespace gm::plan {

Result<Weights> parse_weights(std::string_view text) {
  Weights w{0, 0, 0, 0, 0};
  bool seen[5] = {false, false, false, false, false};
  static const char* const names[5] = {"cost", "perf", "memory", "risk", "carbon"};
  double* slots[5] = {&w.cost, &w.perf, &w.memory, &w.risk, &w.carbon};
  std::size_t pos = 0;
  if (util::trim(text).empty())
    return make_error(ErrorKind::usage, "--weights: empty; e.g. cost=0.5,perf=0.5");
  while (pos <= text.size()) {
    const std::size_t comma = std::min(text.find(',', pos), text.size());
    const std::string_view item = util::trim(text.substr(pos, comma - pos));
    const std::size_t eq = item.find('=');
    if (eq == std::string_view::npos)
      return make_error(ErrorKind::usage, fmt::format("--weights: '{}' is not KEY=VALUE", item));
    const std::string key = util::to_lower(util::trim(item.substr(0, eq)));
    int idx = -1;
    for (int i = 0; i < 5; ++i)
      if (key == names[i]) idx = i;
    if (idx < 0)
      return make_error(ErrorKind::usage,
                        fmt::format("--weights: unknown key '{}' (use cost, perf, memory, risk, "
                                    "carbon)",
                                    key));
    if (seen[idx]) return make_error(ErrorKind::usage, fmt::format("--weights: '{}' given twice", key));
    seen[idx] = true;
    auto v = util::parse_number(item.substr(eq + 1));
    if (!v) return make_error(ErrorKind::usage, fmt::format("--weights: {}: {}", key, v.error().message));
    *slots[idx] = *v;
    pos = comma + 1;
  }
  const double sum = w.cost + w.perf + w.memory + w.risk + w.carbon;
  if (std::fabs(sum - 1.0) > 1e-6)
    return make_error(ErrorKind::usage, fmt::format("--weights: the weights sum to {:g}, not 1", sum));
  return w;
}

void score_options(std::vector<PlanOption>& options, const Weights& w) {
  double min_cost = INFINITY, min_time = INFINITY, max_headroom = 0, min_carbon = INFINITY;
  auto usable = [](const PlanOption& o) {
    return o.fits && o.cost_usd && std::isfinite(*o.cost_usd) && o.time_h && *o.time_h > 0;
  };
  for (const auto& o : options) {
    if (!usable(o)) continue;
    min_cost = std::min(min_cost, *o.cost_usd);
    min_time = std::min(min_time, *o.time_h);
    if (o.gpu_memory_bytes > 0) max_headroom = std::max(max_headroom, o.headroom_bytes / o.gpu_memory_bytes);
    if (o.carbon_kg) min_carbon = std::min(min_carbon, *o.carbon_kg);
  }
  for (auto& o : options) {
    ScoreBreakdown s;
    if (usable(o)) {
      s.cost = *o.cost_usd > 0 ? meter::usd_ratio(min_cost, *o.cost_usd) : 1.0;
      s.perf = min_time / *o.time_h;
      const double headroom = o.gpu_memory_bytes > 0 ? o.headroom_bytes / o.gpu_memory_bytes : 0;
      s.memory = max_headroom > 0 ? std::clamp(headroom / max_headroom, 0.0, 1.0) : 0.0;
      // Probability of finishing without an interruption.
      s.risk = o.spot_detail && std::isfinite(o.spot_detail->mtbi_s)
                   ? std::exp(-*o.time_h * 3600.0 / o.spot_detail->mtbi_s)
                   : 1.0;
      if (o.carbon_kg) s.carbon = *o.carbon_kg > 0 ? min_carbon / *o.carbon_kg : 1.0;
      s.total = w.cost * s.cost + w.perf * s.perf + w.memory * s.memory + w.risk * s.risk +
                w.carbon * s.carbon.value_or(0.0);
    }
    o.score = s;
  }
}

}  // namespace gm::plan
