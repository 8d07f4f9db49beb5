#pragma once
// Self-contained offline HTML pages (uPlot and its CSS inlined, data embedded as JSON, a strict CSP that
// forbids every network request): one run, a multi-run report, a trace analysis. After drawing, the page
// writes a status element (#gm-status) listing every chart, its series and how many pixels each drew.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "findings/findings.h"
#include "findings/priced_trace.h"
#include "report/kpi.h"
#include "report/multi.h"
#include "report/trace_render.h"
#include "store/store.h"
#include "trace/trace.h"
#include "util/result.h"

namespace gm::report {

/// Everything a run page shows.
struct RunHtmlInput {
  store::RunRecord run;
  std::vector<store::SampleRecord> samples;
  std::vector<store::ProgressRecord> progress;
  std::vector<store::ActionRecord> actions;
  std::optional<RunKpis> kpis;
  std::string rightsizing_hint;             ///< one sentence, "" when none
  std::vector<findings::Finding> findings;  ///< the run report's findings, shown first as cards
};

/// The run page: cost over time with budget and forecast, utilization / memory / power per GPU, progress
/// and metric curves, waste breakdown, per-step cost, KPIs and the rightsizing hint. Error only when the
/// charting library is not embedded in this build.
Result<std::string> render_run_html(const RunHtmlInput& input);

/// The multi-run page: cost per group, waste breakdown, totals and top runs.
Result<std::string> render_multi_html(const MultiReport& report);

/// The trace page from a priced trace: findings, then for folders of rank traces the job view (straggler
/// cost), then per device the temporal split, the per-step split, a one-step stream timeline, the top kernels
/// and operators and sortable tables. Error only when the charting library is not embedded in this build.
Result<std::string> render_trace_html(const findings::PricedTrace& trace);

/// How the trace page prices its figures (render_trace_html of the analyses).
struct TraceHtmlOptions {
  std::optional<MicroUsd> price_micros_per_gpu_hour;  ///< nullopt: figures in time only
  std::string price_source;                           ///< where the price came from ("--price", ...)
  const catalog::Catalog* catalog = nullptr;          ///< GPU specs for the findings (fp32_math); may be null
};

/// The trace page of the analyses: price_trace at `options`, then the page of the priced trace.
Result<std::string> render_trace_html(const std::vector<trace::FileAnalysis>& files,
                                      const TraceHtmlOptions& options);

/// The trace diff page (`gpumeter trace diff --html`): verdict and what failed the gate first, the per-step
/// split by class of both runs, then sortable-by-eye tables of classes, kernels, operators and annotations.
Result<std::string> render_trace_diff_html(const findings::PricedDiff& diff,
                                           const report::TraceDiffView& view);

}  // namespace gm::report
