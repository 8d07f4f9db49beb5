#pragma once
// A run's MFU and GPU activity in its report (internal to src/report).
#include <nlohmann/json.hpp>

#include "catalog/catalog.h"
#include "report/run_report.h"

namespace gm::report::detail {

/// Fills r.mfu (and its basis) from the run's tokens, FLOPs per token, the catalog's dense peak of its GPU
/// at its precision, its allocated GPUs and the time after start-up; a note says what is missing instead.
void add_run_mfu(RunReport& r, const catalog::Catalog* catalog);
/// GPM thresholds of the run findings (percent of the working time; docs/findings.md).
inline constexpr double kGpmTensorIdlePct = 5.0;  ///< fp32_math: tensor cores under this
inline constexpr double kGpmFp32BusyPct = 25.0;   ///< fp32_math: FP32 pipes at least this
inline constexpr double kGpmLowTensorPct = 20.0;  ///< low_tensor_activity: tensor cores under this
inline constexpr double kGpmSmBusyPct =
    50.0;  ///< low_tensor_activity: SMs at least this; memory_bound: under
inline constexpr double kGpmDramHighPct = 50.0;  ///< memory_bound: DRAM bandwidth at least this

/// A run finding's severity from the share of the run's cost it concerns: high ≥ 30 %, medium ≥ 15 %, low ≥ 5
/// %.
findings::Severity severity_of(MicroUsd part, MicroUsd whole);
/// A run finding's dollars from the part of the run's cost it concerns: in all, per 1k steps, per month.
void price_finding(findings::Finding& f, MicroUsd part, const RunReport& r);

/// Appends the findings from GPM activity (fp32_math, low_tensor_activity, memory_bound) and re-sorts them.
void add_gpm_findings(RunReport& r, const catalog::Catalog* catalog);

/// The per-GPU GPM keys (percent, averages while working; null where not measured).
void add_gpm_json(nlohmann::json& gpu, const store::GpmPct& gpm);
/// "SM 93% · tensor 86% · FP32 0% · DRAM 22%" of the measured values, "" when none.
std::string gpm_text(const store::GpmPct& gpm);

}  // namespace gm::report::detail
