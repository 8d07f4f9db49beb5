#pragma once
// Renderers of `gpumeter trace` results: terminal text, JSON (the contract keys), CSV.
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "trace/trace.h"
#include "util/money.h"

namespace gm {
class Catalog;
}

namespace gm::report {

/// How to price and present trace results.
struct TraceRenderOptions {
  std::optional<MicroUsd> price_micros_per_gpu_hour;  ///< none: figures in time only
  std::string price_source;                           ///< where the price came from ("--price", ...)
  std::optional<std::int64_t> project_steps;          ///< --steps N
  std::size_t top = 10;                               ///< rows per terminal breakdown
  std::vector<std::string> by;                        ///< kernel / op / annotation / step; empty = all
  const Catalog* catalog = nullptr;                   ///< GPU specs for the findings (fp32_math); may be null
};

/// The cost of `ns` GPU-nanoseconds at the options' price (meter's integer pico-dollars); none without a
/// price.
std::optional<double> trace_cost_usd(std::int64_t ns, const TraceRenderOptions& options);

/// The terminal report.
std::string trace_text(const std::vector<trace::FileAnalysis>& files, const TraceRenderOptions& options);
/// The --json document (keys per the trace contract, integer nanoseconds).
std::string trace_json(const std::vector<trace::FileAnalysis>& files, const TraceRenderOptions& options);
/// The job view of folders of rank traces (terminal); "" without such a folder.
std::string job_text(const std::vector<trace::JobAnalysis>& jobs, const TraceRenderOptions& options);
/// One job as the --json `job` object (window_ns, cost_usd, straggler_cost_usd, ranks, steps, notes).
nlohmann::json job_json(const trace::JobAnalysis& job, const TraceRenderOptions& options);
/// The --csv table: one row per (file, device, breakdown, entry).
std::string trace_csv(const std::vector<trace::FileAnalysis>& files, const TraceRenderOptions& options);

}  // namespace gm::report
