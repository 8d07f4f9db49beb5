#pragma once
// Renderers of `gpumeter trace` and `gpumeter trace diff` results: terminal text, JSON (the contract keys),
// CSV. They read a trace priced once (findings::PricedTrace / PricedDiff) and price nothing themselves.
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "findings/priced_trace.h"
#include "trace/trace.h"

namespace gm::report {

/// How to present trace results in the terminal.
struct TraceRenderOptions {
  std::size_t top = 10;         ///< rows per terminal breakdown
  std::vector<std::string> by;  ///< kernel / op / annotation / step; empty = all
};

/// The terminal report.
std::string trace_text(const findings::PricedTrace& trace, const TraceRenderOptions& options);
/// The --json document (keys per the trace contract, integer nanoseconds).
std::string trace_json(const findings::PricedTrace& trace);
/// The job view of folders of rank traces (terminal); "" without such a folder.
std::string job_text(const findings::PricedTrace& trace);
/// One job as the --json `job` object (window_ns, cost_usd, straggler_cost_usd, ranks, steps, notes).
nlohmann::json job_json(const trace::JobAnalysis& job, const findings::JobCosts& costs);
/// The --csv table: one row per (file, device, breakdown, entry).
std::string trace_csv(const findings::PricedTrace& trace);

/// What a trace diff compared and how it was gated and presented.
struct TraceDiffView {
  std::string base_path, new_path;
  double max_increase = 0.05;   ///< the gate's threshold (fraction)
  double min_share = 0.01;      ///< items under this share of busy time are not gated
  std::size_t top = 10;         ///< rows per terminal breakdown
  std::vector<std::string> by;  ///< kernel / op / annotation; empty = all
};

/// `gpumeter trace diff`: the terminal comparison and verdict.
std::string trace_diff_text(const findings::PricedDiff& diff, const TraceDiffView& view);
/// `gpumeter trace diff --json`: the verdict for CI.
std::string trace_diff_json(const findings::PricedDiff& diff, const TraceDiffView& view);

}  // namespace gm::report
