// Budget policy.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "guard/guard.h"
#include "meter/meter.h"
#include "util/units.h"

namespace gm::guard {

std::vector<GuardDecision> BudgetGuard::evaluate(const GuardInput& in) {
  std::vector<GuardDecision> out;
  if (!config_.budget_micros && !config_.max_idle_ms && config_.team_budgets.empty()) return out;
  const std::string spent = util::format_micros(in.spent_micros);
  if (config_.budget_micros) {
    const MicroUsd budget = *config_.budget_micros;
    warned_.resize(config_.warn_at_pct.size(), false);
    for (std::size_t i = 0; i < config_.warn_at_pct.size(); ++i) {
      const double pct = config_.warn_at_pct[i];
      if (warned_[i] || pct >= 100.0) continue;
      if (in.spent_micros >= meter::scale_micros(budget, pct / 100.0)) {
        warned_[i] = true;
        out.push_back({store::ActionKind::warn, std::nullopt,
                       fmt::format("spent {} of the {} budget ({:g}% threshold)", spent,
                                   util::format_micros(budget), pct)});
      }
    }
  }
  // Team budgets: this run's spend plus the other runs of the selector, as of their last heartbeat.
  team_warned_.resize(config_.team_budgets.size());
  std::optional<std::size_t> team_reached;
  for (std::size_t t = 0; t < config_.team_budgets.size(); ++t) {
    if (t >= in.team_others_micros.size() || !in.team_others_micros[t]) continue;
    const TeamBudget& b = config_.team_budgets[t];
    const MicroUsd total = meter::combined_spend_micros(in.spent_micros, *in.team_others_micros[t]);
    team_warned_[t].resize(config_.warn_at_pct.size(), false);
    for (std::size_t i = 0; i < config_.warn_at_pct.size(); ++i) {
      const double pct = config_.warn_at_pct[i];
      if (team_warned_[t][i] || pct >= 100.0) continue;
      if (total >= meter::scale_micros(b.limit_micros, pct / 100.0)) {
        team_warned_[t][i] = true;
        out.push_back({store::ActionKind::warn, std::nullopt,
                       fmt::format("team budget {}: {} spent this {} of {} ({:g}% threshold; this run {})",
                                   b.selector, util::format_micros(total), util::text_of(b.period),
                                   util::format_micros(b.limit_micros), pct, spent)});
      }
    }
    if (!team_reached && total >= b.limit_micros) team_reached = t;
  }
  if (stopped_) return out;
  if (team_reached && !(config_.budget_micros && in.spent_micros >= *config_.budget_micros)) {
    const TeamBudget& b = config_.team_budgets[*team_reached];
    const MicroUsd total =
        meter::combined_spend_micros(in.spent_micros, *in.team_others_micros[*team_reached]);
    stopped_ = true;
    out.push_back(
        {store::ActionKind::stop_budget, store::StopReason::budget,
         fmt::format("team budget {}: {} spent this {} by its runs on every machine (this run {}) — "
                     "the {} budget is reached",
                     b.selector, util::format_micros(total), util::text_of(b.period), spent,
                     util::format_micros(b.limit_micros))});
    return out;
  }
  if (config_.budget_micros && in.spent_micros >= *config_.budget_micros) {
    stopped_ = true;
    out.push_back({store::ActionKind::stop_budget, store::StopReason::budget,
                   fmt::format("spent {} — the {} budget is reached", spent,
                               util::format_micros(*config_.budget_micros))});
    return out;
  }
  if (config_.forecast_stop && config_.budget_micros && in.forecast &&
      in.elapsed_ms >= config_.forecast_min_elapsed_ms &&
      in.forecast_intervals >= config_.forecast_min_intervals &&
      meter::forecast_over_budget_micros(in.forecast->low_usd, *config_.budget_micros) > 0) {
    stopped_ = true;
    out.push_back(
        {store::ActionKind::stop_forecast, store::StopReason::forecast,
         fmt::format("forecast {} (at least {}) exceeds the {} budget at step {}/{}; spent {}",
                     util::format_usd(in.forecast->total_usd), util::format_usd(in.forecast->low_usd),
                     util::format_micros(*config_.budget_micros), in.forecast->step, in.forecast->total_steps,
                     spent)});
    return out;
  }
  if (config_.max_idle_ms && in.idle_for_ms && *in.idle_for_ms >= *config_.max_idle_ms) {
    stopped_ = true;
    out.push_back(
        {store::ActionKind::stop_idle, store::StopReason::idle,
         fmt::format("every allocated GPU under {:g}% utilization for {}; spent {}", meter::kIdleUtilPct,
                     util::format_duration_s(static_cast<double>(*in.idle_for_ms) / 1000.0), spent)});
  }
  return out;
}

Result<std::vector<double>> parse_warn_at(std::string_view text) {
  std::vector<double> out;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    std::size_t comma = text.find(',', pos);
    if (comma == std::string_view::npos) comma = text.size();
    const std::string_view item = util::trim(text.substr(pos, comma - pos));
    auto pct = util::parse_percent(item);
    if (!pct || *pct <= 0.0)
      return make_error(ErrorKind::usage,
                        fmt::format("--warn-at: '{}' is not a percentage in (0%, 100%]", item));
    out.push_back(*pct);
    pos = comma + 1;
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace gm::guard
