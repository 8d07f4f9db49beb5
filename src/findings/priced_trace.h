#pragma once
// A trace priced once (issue 36): the analyses of `gpumeter trace` with the cost of every figure its
// renderers show and the findings, computed here at one price. The terminal, JSON, CSV and HTML renderers,
// the job view and the trace diff read these costs; none of them prices a figure or runs the findings.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "findings/findings.h"
#include "trace/trace.h"
#include "util/money.h"

namespace gm::catalog {
class Catalog;
}

namespace gm::findings {

/// The price of a trace's GPU time and where it came from.
struct TracePrice {
  std::optional<MicroUsd> micros_per_gpu_hour;  ///< nullopt: figures in time only
  std::string source;                           ///< "--price", "catalog reference: ...", ...
};

/// Dollars of a figure for display (from meter's integer pico-dollars); nullopt without a price.
using UsdOrNone = std::optional<double>;

/// The costs of one breakdown, row by row in the analysis' order.
struct BreakdownCosts {
  std::vector<UsdOrNone> attributed_usd;  ///< each row's fair share of busy time
  std::vector<UsdOrNone> step_usd;        ///< steps only: each step's wall time (none for "(outside steps)")
  /// rest_usd[i]: the rows from i on, their time summed then priced (the "(N more)" row); size rows + 1.
  std::vector<UsdOrNone> rest_usd;
};

/// The costs of one GPU device of a file.
struct DeviceCosts {
  UsdOrNone window_usd, busy_usd, idle_usd, compute_usd, communication_usd, memory_usd, overlap_usd,
      kernel_usd;
  UsdOrNone idle_host_wait_usd, idle_dispatch_usd, idle_input_usd, idle_host_sync_usd, idle_other_usd,
      idle_in_graph_usd;
  UsdOrNone before_window_usd;      ///< activities launched before the profiler's window (fair share)
  UsdOrNone per_step_usd;           ///< the mean ProfilerStep time; none without steps
  UsdOrNone idle_per_1k_steps_usd;  ///< idle cost ÷ steps × 1000; none without steps
  UsdOrNone projected_usd;          ///< per_step_usd × the projected steps (--steps)
  BreakdownCosts kernels, operators, annotations, steps, before_window_kernels;
  std::vector<Finding> findings;  ///< for_trace_device
};

/// The costs of a file's host side (CPU time at the GPU price: the CPU-only report).
struct HostCosts {
  UsdOrNone window_usd;
  UsdOrNone per_step_usd;            ///< the mean ProfilerStep time; none without steps
  std::vector<UsdOrNone> steps_usd;  ///< each step's wall time
  std::vector<Finding> findings;     ///< for_trace_host
};

/// The costs of one file, aligned with its analysis.
struct FileCosts {
  std::vector<DeviceCosts> devices;  ///< as FileAnalysis::devices
  std::optional<HostCosts> host;     ///< as FileAnalysis::host
};

/// The costs of one job (a folder of rank traces).
struct JobCosts {
  UsdOrNone gpu_usd;                                                    ///< the GPU time the job held
  UsdOrNone wait_usd;                                                   ///< every rank's straggler wait
  std::vector<UsdOrNone> rank_wait_caused_usd, rank_wait_suffered_usd;  ///< as JobAnalysis::ranks
  std::vector<UsdOrNone> step_wait_usd;                                 ///< as JobAnalysis::steps
  std::vector<std::vector<UsdOrNone>> step_rank_wait_usd;               ///< as JobStep::wait_by_rank_ns
};

/// Sums over every device of every file (the trace page's cards).
struct TraceTotals {
  std::size_t devices = 0;
  std::int64_t window_ns = 0, busy_ns = 0, idle_ns = 0;
  UsdOrNone window_usd;                      ///< Σ windows, priced once
  std::optional<std::int64_t> straggler_ns;  ///< Σ jobs' straggler wait; none without a matched collective
  UsdOrNone straggler_usd;
};

/// The analyses of `gpumeter trace` priced once.
struct PricedTrace {
  std::vector<trace::FileAnalysis> files;
  std::vector<trace::JobAnalysis> jobs;  ///< analyze_jobs(files)
  TracePrice price;
  std::optional<std::int64_t> project_steps;  ///< --steps N
  std::vector<FileCosts> costs;               ///< as files
  std::vector<JobCosts> job_costs;            ///< as jobs
  TraceTotals totals;
};

/// Prices the analyses: every figure's cost, the jobs of folders of ranks and the findings (`catalog`, which
/// may be null, gives GPU specs to the fp32_math finding).
PricedTrace price_trace(std::vector<trace::FileAnalysis> files, const TracePrice& price,
                        const catalog::Catalog* catalog = nullptr,
                        std::optional<std::int64_t> project_steps = {});

/// The cost of one compared row per step (or per trace) of a trace diff.
struct DiffRowCosts {
  UsdOrNone base_usd, new_usd, delta_usd;
};

/// A trace diff priced once.
struct PricedDiff {
  trace::TraceDiff diff;
  TracePrice price;
  std::vector<DiffRowCosts> summary, kernels, operators, annotations;  ///< as the diff's rows
};

/// The first GPU name the files' deviceProperties give (what a catalog reference price is looked up by).
std::optional<std::string> first_gpu_name(const std::vector<trace::FileAnalysis>& files);

/// Prices a trace diff's rows.
PricedDiff price_diff(trace::TraceDiff diff, const TracePrice& price);

}  // namespace gm::findings
