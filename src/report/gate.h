#pragma once
// The release gate: compare run B (candidate) with run A (baseline) on cost, time, KPIs and progress
// metrics, with limits (--max-cost-increase, --min-gain). Verdict: pass, fail, or a usage error when a
// limit names a metric one of the runs lacks.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "report/kpi.h"
#include "store/store.h"
#include "util/result.h"

namespace gm::report {

/// A required change of a metric from A to B: "acc=2%" (relative, at least +2 % of A's value),
/// "acc=+0.02" (absolute), "loss=-5%" (must fall by at least 5 %).
struct MinGain {
  std::string metric;
  double amount = 0;
  bool relative = true;
};

/// Parses `--min-gain` text; usage error naming it when malformed.
Result<MinGain> parse_min_gain(std::string_view text);
/// Parses `--max-cost-increase` text ("20%", "20", "-5%"): percent of A's cost; usage error otherwise.
Result<double> parse_cost_increase_pct(std::string_view text);

/// What one side of the comparison brings.
struct CompareSide {
  store::RunRecord run;
  std::vector<store::ProgressRecord> progress;
  std::vector<store::InferenceRecord>
      inference;  ///< serving counters (runs that wrapped an inference server)
};

/// Gate limits.
struct GateOptions {
  std::optional<double> max_cost_increase_pct;
  /// Served runs: fail when B's $ per 1M generated tokens exceeds A's by more than this percent (usage error
  /// when either run has no such figure).
  std::optional<double> max_token_cost_increase_pct;
  std::vector<MinGain> min_gains;
};

/// One line of the verdict table.
struct CompareRow {
  std::string name;  ///< "cost_usd", "wall_s", "usd_per_1m_tokens", "metric:acc"
  std::optional<double> a;
  std::optional<double> b;
  std::optional<double> delta;      ///< b − a
  std::optional<double> delta_pct;  ///< (b − a) ÷ |a| × 100
  std::string limit;                ///< "<= +20%" or "" when not gated
  std::optional<bool> pass;         ///< nullopt when not gated
};

/// The verdict.
struct CompareResult {
  std::int64_t run_a = 0;
  std::int64_t run_b = 0;
  std::vector<CompareRow> rows;
  bool pass = true;  ///< every gated row passed
  std::vector<std::string> failures;
};

/// Compares B against A. Usage error (ErrorKind::usage) when a --min-gain metric is missing from either run.
Result<CompareResult> compare_runs(const CompareSide& a, const CompareSide& b, const GateOptions& gate);

/// Table for the terminal, with PASS / FAIL.
std::string render_compare_text(const CompareResult& result);
/// JSON for CI: {"run_a", "run_b", "pass", "failures", "rows": [{"name", "a", "b", "delta", "delta_pct",
/// "limit", "pass"}]}.
std::string render_compare_json(const CompareResult& result);

}  // namespace gm::report
