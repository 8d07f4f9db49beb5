#pragma once
// Internal to src/report: the HTML page shell shared by the run, multi-run and trace pages.
#include <nlohmann/json.hpp>
#include <string>

#include "util/result.h"

namespace gm::html {

/// Wraps a page spec ({"title", "subtitle", "summary": [[k, v]...], "notes": [...], "charts": [...],
/// "tables": [...]}) into a self-contained page with uPlot inlined and a CSP that forbids network access.
Result<std::string> page(const nlohmann::json& spec);

/// A line chart over numeric x: series are {"label", "values", "dash"?}; values may hold nulls (gaps).
nlohmann::json line_chart(const std::string& id, const std::string& title, const std::string& x_label,
                          const std::string& y_label, const std::vector<double>& x, nlohmann::json series);
/// A bar chart: one bar per category.
nlohmann::json bar_chart(const std::string& id, const std::string& title, const std::string& y_label,
                         const std::vector<std::string>& categories, const std::vector<double>& values,
                         const std::string& series_label);

/// Horizontal bars drawn in HTML (no canvas): one row per category with its full name (shown whole on hover)
/// and `value_text` beside the bar; for long names such as kernels and operators.
nlohmann::json hbar_chart(const std::string& id, const std::string& title,
                          const std::vector<std::string>& categories, const std::vector<double>& values,
                          const std::string& series_label, const std::vector<std::string>& value_text);

}  // namespace gm::html
