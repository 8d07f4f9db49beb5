#pragma once
// Findings: advice computed from a trace device's analysis, each with its evidence, the dollars at stake and
// one concrete action (issue 14; kinds, thresholds and reasons in docs/findings.md).
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "trace/trace.h"
#include "util/money.h"

namespace gm::catalog {
class Catalog;
}

namespace gm::findings {

/// How much a finding matters: what share of the money it concerns.
enum class Severity { info, low, medium, high };

/// One measured fact behind a finding ("host_wait_share": 0.38, "kernel": "volta_sgemm_128x64_nn").
struct Evidence {
  std::string key;                                        ///< snake_case, unit in the name (`idle_ns`)
  std::variant<std::int64_t, double, std::string> value;  ///< the figure as measured
};

/// A finding: what was seen, what it costs and what to do. Money in integer nano-dollars (meter's
/// arithmetic), fine enough for a one-second trace window and wide enough for a month.
struct Finding {
  std::string kind;  ///< stable identifier documented in docs/findings.md
  Severity severity = Severity::info;
  std::int64_t at_stake_ns = 0;               ///< GPU time the finding concerns in the analysed window
  std::optional<std::int64_t> cost_nano_usd;  ///< that time at the price; nullopt without a price
  std::optional<std::int64_t> nano_usd_per_1k_steps;   ///< nullopt without a price or without profiler steps
  std::optional<std::int64_t> nano_usd_per_month;      ///< at the same share of a GPU busy 730 h a month
  std::string summary;                                 ///< one sentence: what was seen, with the figure
  std::string action;                                  ///< one concrete action
  std::vector<Evidence> evidence;                      ///< the measured facts, in display order
};

/// Lower-case name of a severity ("high").
const char* severity_name(Severity severity);

/// The findings as the JSON array of docs/findings.md (`kind`, `severity`, `cost_usd`, `usd_per_1k_steps`,
/// `usd_per_month`, `summary`, `evidence`, `action`).
nlohmann::json to_json(const std::vector<Finding>& findings);
/// The findings as terminal lines ("findings:" and one entry each), "" when there are none.
std::string to_text(const std::vector<Finding>& findings);

/// Findings of one trace device at `price_micros_per_gpu_hour` (nullopt: time only), largest at stake
/// first: input-bound, dispatch-bound, sync stalls, launch-bound, exposed communication, pageable copies, fp32 math on tensor-core GPUs,
/// unfused attention, one kernel family dominating. `catalog` (optional) gives the GPU's TFLOPS.
std::vector<Finding> for_trace_device(const trace::DeviceAnalysis& device,
                                      std::optional<MicroUsd> price_micros_per_gpu_hour,
                                      const catalog::Catalog* catalog = nullptr);

/// Findings of a trace's host side (CPU operators; the only findings of a CPU-only trace): unfused
/// attention, priced like the CPU-only report (the host's time at the price; nullopt: time only).
std::vector<Finding> for_trace_host(const trace::HostAnalysis& host,
                                    std::optional<MicroUsd> price_micros_per_gpu_hour);

}  // namespace gm::findings
