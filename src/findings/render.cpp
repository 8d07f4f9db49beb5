// Findings as JSON (the contract of docs/findings.md) and as terminal text, shared by `trace` and `report`.
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <variant>

#include "findings/findings.h"
#include "util/json.h"
#include "util/units.h"

namespace gm::findings {
namespace {

std::optional<double> nano_to_usd(const std::optional<std::int64_t>& nano) {
  if (!nano) return std::nullopt;
  return util::nanos_to_usd(*nano);
}

}  // namespace

nlohmann::json to_json(const std::vector<Finding>& fs) {
  auto arr = nlohmann::json::array();
  for (const auto& f : fs) {
    nlohmann::json evidence = nlohmann::json::object();
    for (const auto& e : f.evidence) std::visit([&](const auto& v) { evidence[e.key] = v; }, e.value);
    arr.push_back({{"kind", f.kind},
                   {"severity", severity_name(f.severity)},
                   {"at_stake_ns", f.at_stake_ns},
                   {"cost_usd", util::json_or_null(nano_to_usd(f.cost_nano_usd))},
                   {"usd_per_1k_steps", util::json_or_null(nano_to_usd(f.nano_usd_per_1k_steps))},
                   {"usd_per_month", util::json_or_null(nano_to_usd(f.nano_usd_per_month))},
                   {"summary", f.summary},
                   {"evidence", evidence},
                   {"action", f.action}});
  }
  return arr;
}

std::string to_text(const std::vector<Finding>& fs) {
  if (fs.empty()) return "";
  std::string out = "findings:\n";
  for (const auto& f : fs) {
    std::string money;
    if (f.cost_nano_usd && !f.nano_usd_per_month)
      money = fmt::format(" — {}", util::format_nanos(*f.cost_nano_usd));
    if (f.nano_usd_per_month)
      money = fmt::format(" — {}/month at this rate", util::format_nanos(*f.nano_usd_per_month));
    if (f.nano_usd_per_1k_steps)
      money += fmt::format(", {} per 1k steps", util::format_nanos(*f.nano_usd_per_1k_steps));
    out += fmt::format("  [{}] {}: {}{}\n        → {}\n", severity_name(f.severity), f.kind, f.summary, money,
                       f.action);
  }
  out += "\n";
  return out;
}

}  // namespace gm::findings
