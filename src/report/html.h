#pragma once
// Self-contained offline HTML pages (uPlot and its CSS inlined, data embedded as JSON, a strict CSP that
// forbids every network request): one run, a multi-run report, a trace analysis. After drawing, the page
// writes a status element (#gm-status) listing every chart, its series and how many pixels each drew.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "findings/findings.h"
#include "report/kpi.h"
#include "report/multi.h"
#include "store/store.h"
#include "trace/trace.h"
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
  std::vector<findings::Finding> findings;  ///< the run report's findings, shown first as cards
};

/// The run page: cost over time with budget and forecast, utilization / memory / power per GPU, progress
/// and metric curves, waste breakdown, per-step cost, KPIs and the rightsizing hint. Error only when the
/// charting library is not embedded in this build.
Result<std::string> render_run_html(const RunHtmlInput& input);

/// The multi-run page: cost per group, waste breakdown, totals and top runs.
Result<std::string> render_multi_html(const MultiReport& report);

/// How the trace page prices its figures.
struct TraceHtmlOptions {
  std::optional<MicroUsd> price_micros_per_gpu_hour;  ///< nullopt: figures in time only
  std::string price_source;                      ///< where the price came from ("--price", ...)
  const Catalog* catalog = nullptr;              ///< GPU specs for the findings (fp32_math); may be null
};

/// The trace page from the analyses of `gpumeter trace`: findings, then for folders of rank traces the job
/// view (straggler cost), then per device the temporal split, the per-step split, a one-step stream
/// timeline, the top kernels and operators and sortable tables. Error only when the charting library is not
/// embedded in this build.
Result<std::string> render_trace_html(const std::vector<trace::FileAnalysis>& files,
                                      const TraceHtmlOptions& options);

/// What the trace diff page shows: the comparison and how it was priced and gated.
struct TraceDiffHtmlInput {
  trace::TraceDiff diff;
  std::string base_path, new_path;
  std::optional<MicroUsd> price_micros_per_gpu_hour;  ///< nullopt: figures in time only
  std::string price_source;
  double max_increase = 0.05;  ///< the gate's threshold (fraction)
  double min_share = 0.01;     ///< items under this share of busy time are not gated
};

/// The trace diff page (`gpumeter trace diff --html`): verdict and what failed the gate first, the per-step
/// split by class of both runs, then sortable-by-eye tables of classes, kernels, operators and annotations.
Result<std::string> render_trace_diff_html(const TraceDiffHtmlInput& input);

}  // namespace gm
