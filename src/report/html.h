#pragma once
// Self-contained offline HTML pages (uPlot and its CSS inlined, data embedded as JSON, a strict CSP that
// forbids every network request): one run, a multi-run report, a trace analysis. After drawing, the page
// writes a status element (#gm-status) listing every chart, its series and how many pixels each drew.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "report/kpi.h"
#include "report/multi.h"
#include "store/store.h"
#include "util/result.h"

namespace gm {

/// Everything a run page shows.
struct RunHtmlInput {
  RunRecord run;
  std::vector<SampleRecord> samples;
  std::vector<ProgressRecord> progress;
  std::vector<ActionRecord> actions;
  std::optional<RunKpis> kpis;
  std::string rightsizing_hint;  ///< one sentence, "" when none
};

/// The run page: cost over time with budget and forecast, utilization / memory / power per GPU, progress
/// and metric curves, waste breakdown, per-step cost, KPIs and the rightsizing hint. Error only when the
/// charting library is not embedded in this build.
Result<std::string> render_run_html(const RunHtmlInput& input);

/// The multi-run page: cost per group, waste breakdown, totals and top runs.
Result<std::string> render_multi_html(const MultiReport& report);

/// The trace page from the text of `gpumeter trace --json`: per device the temporal split (compute /
/// communication / memory / idle) and the top kernels and operators by cost. Error (naming the key or
/// offset) when the text is not that JSON.
Result<std::string> render_trace_html(std::string_view trace_json);

}  // namespace gm
