#pragma once
// The `target` object of a run's report (run_report.cpp) and its chart on the run page (html.cpp).
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "guard/target_guard.h"

namespace gm::report::detail {

/// The report's `target` object: metric, op, value, verdict, reached_at_step, reached_at_s,
/// cost_to_reach_usd, low_usd, high_usd, current_value, why, stop_evidence, forecast_history.
nlohmann::json target_json(const guard::TargetOutcome& target);
/// The report's text line(s) for the target.
std::string target_text(const guard::TargetOutcome& target);
/// The run page's chart of the metric against the step: the points, the plausible fits' range and the
/// closest fit out to `horizon_step`, and the target line. nullopt with no points.
std::optional<nlohmann::json> target_chart(const meter::MetricTarget& target,
                                           const std::vector<meter::CurvePoint>& points,
                                           std::optional<std::int64_t> horizon_step);

}  // namespace gm::report::detail
