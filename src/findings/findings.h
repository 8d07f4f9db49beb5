#pragma once
// Findings: advice computed from a trace device's analysis or a run's report, each with its evidence, the
// dollars at stake and one concrete action (issue 14; kinds, thresholds and reasons in docs/findings.md).
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace gm::findings {

/// How much a finding matters: what share of the money it concerns.
enum class Severity { info, low, medium, high };

/// One measured fact behind a finding ("host_wait_share": 0.38, "kernel": "volta_sgemm_128x64_nn").
struct Evidence {
  std::string key;                                        ///< snake_case, unit in the name (`idle_ns`)
  std::variant<std::int64_t, double, std::string> value;  ///< the figure as measured
};

/// A finding: what was seen, what it costs and what to do.
struct Finding {
  std::string kind;  ///< stable identifier documented in docs/findings.md
  Severity severity = Severity::info;
  std::int64_t cost_micro_usd = 0;                     ///< dollars at stake over the analysed window or run
  std::optional<std::int64_t> micro_usd_per_1k_steps;  ///< nullopt when steps are unknown
  std::optional<std::int64_t> micro_usd_per_month;     ///< at the current rate, 730 h; nullopt without a rate
  std::string summary;                                 ///< one sentence: what was seen, with the figure
  std::string action;                                  ///< one concrete action
  std::vector<Evidence> evidence;                      ///< the measured facts, in display order
};

/// Lower-case name of a severity ("high").
const char* severity_name(Severity severity);

}  // namespace gm::findings
