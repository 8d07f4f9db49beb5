#pragma once
// Internal to src/report: the HTML page shell shared by the run, multi-run and trace pages.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "findings/findings.h"
#include "util/result.h"

namespace gm::report::html {

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

/// Horizontal bars drawn in HTML (no canvas): one row per category with its name (cut with an ellipsis when
/// long, shown whole on hover: `hover` when given, e.g. the full kernel name behind a short one) and
/// `value_text` beside the bar; for long names such as kernels and operators.
nlohmann::json hbar_chart(const std::string& id, const std::string& title,
                          const std::vector<std::string>& categories, const std::vector<double>& values,
                          const std::string& series_label, const std::vector<std::string>& value_text,
                          const std::vector<std::string>& hover = {});

/// Vertical stacked bars drawn in HTML: one column per category (e.g. a profiler step), one stacked
/// segment per series (`values[s][c]`), a legend, the largest column's total on the axis.
nlohmann::json stacked_chart(const std::string& id, const std::string& title, const std::string& unit,
                             const std::vector<std::string>& categories,
                             const std::vector<std::string>& series,
                             const std::vector<std::vector<double>>& values);

/// One activity of a timeline chart.
struct TimelineItem {
  std::string lane;       ///< e.g. the stream
  std::int64_t start_ns;  ///< from the chart's start
  std::int64_t dur_ns;
  std::string klass;  ///< colour: compute, communication, memory
  std::string name;   ///< shown on hover
};

/// A timeline drawn in HTML: one lane per distinct `lane`, activities placed in [0, window_ns], coloured
/// by class, full name and duration on hover.
nlohmann::json timeline_chart(const std::string& id, const std::string& title, std::int64_t window_ns,
                              const std::vector<TimelineItem>& items);

/// Appends the page cards of `findings` (severity, kind, where, summary, the dollars at stake, action).
void add_finding_cards(nlohmann::json& cards, const std::vector<findings::Finding>& findings,
                       const std::string& where);

}  // namespace gm::report::html
