// The target collaborator of the run supervisor (docs/run.md "Targets").
#include "guard/target_guard.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "util/units.h"

namespace gm::guard {

std::string describe_target_forecast(const meter::MetricTarget& target, const meter::TargetForecast& f) {
  std::string name = meter::format_metric_target(target);
  switch (f.verdict) {
    case meter::TargetVerdict::too_early:
      return name + ": too early to tell (" + f.why + ")";
    case meter::TargetVerdict::reached:
      return name + ": reached" +
             (f.cost_to_reach_usd ? " with " + util::format_usd(*f.cost_to_reach_usd) + " spent" : "") +
             " (" + f.why + ")";
    case meter::TargetVerdict::on_track:
    case meter::TargetVerdict::unreachable_within_budget: {
      std::string s =
          name + (f.verdict == meter::TargetVerdict::on_track ? ": on track" : ": not before the budget");
      if (f.reached_at_step) s += fmt::format(", at ~step {:.0f}", *f.reached_at_step);
      if (f.cost_to_reach_usd) {
        s += ", " + util::format_usd(*f.cost_to_reach_usd) + " in all";
        s += " [" + util::format_usd(f.low_usd.value_or(*f.cost_to_reach_usd)) + "–" +
             (f.high_usd ? util::format_usd(*f.high_usd) : std::string("not reached")) + "]";
      }
      return s + " (" + f.why + ")";
    }
    case meter::TargetVerdict::unreachable_within_steps:
      return name + ": not reachable within the planned steps (" + f.why + ")";
  }
  return name;
}

meter::TargetInputs target_inputs(double now_s, const std::optional<store::ProgressRecord>& latest,
                                  const std::optional<meter::Forecast>& pace, MicroUsd spent_micros,
                                  double burn_usd_per_s, std::optional<MicroUsd> budget_micros, bool priced) {
  meter::TargetInputs in;
  in.now_s = now_s;
  if (latest) {
    in.step = latest->step.value_or(0);
    in.total_steps = latest->total_steps;
  }
  in.pace = pace;
  in.spent_usd = util::micros_to_usd(spent_micros);
  in.burn_usd_per_s = burn_usd_per_s;
  if (budget_micros) in.budget_usd = util::micros_to_usd(*budget_micros);
  in.priced = priced;
  return in;
}

store::ActionRecord target_set_action(std::int64_t run_id, const TargetSettings& settings) {
  return store::ActionRecord{
      run_id, 0, store::ActionKind::target_set, 0,
      meter::format_metric_target(settings.target) + (settings.stop ? " --target-stop" : "")};
}

std::optional<TargetSettings> target_of_actions(const std::vector<store::ActionRecord>& actions) {
  for (const auto& a : actions) {
    if (a.kind != store::ActionKind::target_set) continue;
    std::string text = a.message;
    TargetSettings s;
    if (const auto at = text.find(" --target-stop"); at != std::string::npos) {
      s.stop = true;
      text.erase(at);
    }
    auto t = meter::parse_metric_target(text);
    if (!t) return std::nullopt;
    s.target = *t;
    return s;
  }
  return std::nullopt;
}

void TargetGuard::on_progress(const ProgressUpdate& update, std::optional<std::int64_t> step, double t_s,
                              double spent_usd) {
  if (step) last_step_ = *step;
  const auto it = update.metrics.find(settings_.target.metric);
  if (it == update.metrics.end()) return;
  tracker_.add(last_step_, it->second, t_s, spent_usd);
}

bool TargetGuard::keeps(const ProgressUpdate& update, std::int64_t t_ms) {
  // The point after a kept one starts a row of its own too, so the kept value stays at its step.
  const bool after_kept = last_kept_;
  last_kept_ = false;
  if (!update.metrics.count(settings_.target.metric)) return after_kept;
  if (t_ms / 1000 != kept_second_) {
    kept_second_ = t_ms / 1000;
    kept_in_second_ = 0;
  }
  last_kept_ = ++kept_in_second_ <= kTargetPointsPerSecond;
  return last_kept_ || after_kept;
}

std::vector<GuardDecision> TargetGuard::tick(const meter::TargetInputs& in, std::int64_t elapsed_ms,
                                             std::size_t forecast_intervals, MicroUsd spent_micros) {
  const meter::TargetForecast& f = tracker_.update(in);
  std::vector<GuardDecision> out;
  const std::string spent_text = "spent " + util::format_micros(spent_micros) + "; ";
  // Each verdict is announced the first time it is reached (a verdict that flaps is not a line a second).
  if (f.verdict != meter::TargetVerdict::too_early &&
      std::find(announced_.begin(), announced_.end(), f.verdict) == announced_.end()) {
    announced_.push_back(f.verdict);
    out.push_back({store::ActionKind::target, std::nullopt,
                   spent_text + describe_target_forecast(settings_.target, f)});
  }
  if (!settings_.stop || stop_evidence_ || elapsed_ms < min_elapsed_ms_ ||
      forecast_intervals < min_intervals_)
    return out;
  // A stop needs every plausible fit to agree: none reaches even the eased target within the planned
  // steps, or even the optimistic end of the cost is over the budget.
  const bool beyond_steps =
      f.verdict == meter::TargetVerdict::unreachable_within_steps && in.total_steps && !f.low_step;
  const bool beyond_budget = in.budget_usd && f.low_usd && *f.low_usd > *in.budget_usd &&
                             f.verdict == meter::TargetVerdict::unreachable_within_budget;
  if (!beyond_steps && !beyond_budget) return out;
  stop_evidence_ = describe_target_forecast(settings_.target, f);
  out.push_back({store::ActionKind::stop_target, store::StopReason::target,
                 spent_text + meter::format_metric_target(settings_.target) +
                     (beyond_steps ? " is forecast unreachable within the planned steps: "
                                   : " is forecast unreachable within the budget: ") +
                     f.why});
  return out;
}

std::optional<TargetStatus> TargetGuard::status() const {
  if (!tracker_.latest()) return std::nullopt;
  return TargetStatus{settings_.target, *tracker_.latest()};
}

TargetOutcome TargetGuard::outcome() const {
  TargetOutcome o;
  o.target = settings_.target;
  o.stop_enabled = settings_.stop;
  if (tracker_.latest()) o.forecast = *tracker_.latest();
  o.history = tracker_.history();
  o.points = tracker_.points();
  o.stop_evidence = stop_evidence_;
  return o;
}

}  // namespace gm::guard
