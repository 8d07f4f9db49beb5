// The served-counter fold: per model, what an engine served between two readings (the agent's cost join
// and `gpumeter run --inference-endpoint` both count with it).
#include <algorithm>
#include <cmath>

#include "serving/serving.h"

namespace gm::serving {

ServedFold::Step ServedFold::add(const EngineReading& r) {
  Step step;
  step.restarted = r.start_time_s && start_time_s_ && *r.start_time_s != *start_time_s_;
  if (r.start_time_s) start_time_s_ = r.start_time_s;
  const bool had_baseline = baselined_;
  baselined_ = true;
  bool dropped = false;
  for (const auto& [model, totals] : r.models) {
    const bool added = !deltas_.count(model);
    if (added && deltas_.size() >= kMaxModels) continue;
    auto& d = deltas_[model];
    // A model that appears after the baseline (a LoRA adapter loaded later) served all it shows since then.
    if (added && (count_from_zero_ || had_baseline))
      for (auto& x : d) x.start_from_zero();
    const std::array<std::optional<double>, 4> now{totals.prompt_tokens, totals.generated_tokens,
                                                   totals.cached_tokens, totals.requests};
    ServedDelta& out = step.models[model];
    for (std::size_t k = 0; k < 4; ++k) {
      if (!now[k] || !std::isfinite(*now[k])) continue;
      const unsigned resets = d[k].resets();
      out.counts[k] = d[k].add(std::max(0.0, *now[k]), step.restarted);
      out.has[k] = true;
      dropped = dropped || d[k].resets() > resets;
    }
  }
  step.restarted = step.restarted || dropped;
  return step;
}

std::map<std::string, std::array<std::optional<double>, 4>> ServedFold::previous() const {
  std::map<std::string, std::array<std::optional<double>, 4>> out;
  for (const auto& [model, d] : deltas_)
    for (std::size_t k = 0; k < 4; ++k) out[model][k] = d[k].previous();
  return out;
}

void ServedFold::resume(std::optional<double> start_time_s,
                        const std::map<std::string, std::array<std::optional<double>, 4>>& previous) {
  baselined_ = true;
  start_time_s_ = start_time_s;
  for (const auto& [model, prev] : previous)
    for (std::size_t k = 0; k < 4; ++k)
      if (prev[k]) deltas_[model][k].resume_from(*prev[k]);
}

}  // namespace gm::serving
