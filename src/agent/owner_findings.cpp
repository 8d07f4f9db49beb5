// Findings of live owners (docs/findings.md "Live owners"): a process that holds GPUs and leaves them idle
// costs its whole rate; one that keeps them half idle costs the idle half.
#include <fmt/format.h>

#include <cmath>

#include "agent/collector.h"
#include "meter/meter.h"
#include "util/units.h"

namespace gm::agent {
namespace {

constexpr double kIdleHeldShare = 0.90;  ///< at or above: the GPUs are held, not used
constexpr double kLowUtilShare = 0.50;   ///< at or above: more than half of the spend is idle time

findings::Severity severity_of(std::int64_t nano_usd_per_month) {
  if (nano_usd_per_month >= meter::nanos_of_usd(1000)) return findings::Severity::high;
  if (nano_usd_per_month >= meter::nanos_of_usd(200)) return findings::Severity::medium;
  if (nano_usd_per_month >= meter::nanos_of_usd(20)) return findings::Severity::low;
  return findings::Severity::info;
}

}  // namespace

std::vector<findings::Finding> owner_findings(const OwnerTotal& t) {
  std::vector<findings::Finding> out;
  if (t.cost <= 0) return out;
  const double idle_share = meter::cost_share(t.idle_cost, t.cost);
  if (idle_share < kLowUtilShare) return out;
  findings::Finding f;
  const bool held = idle_share >= kIdleHeldShare;
  const std::string gpus =
      t.gpus.size() == 1 ? "GPU " + std::to_string(t.gpus[0]) : std::to_string(t.gpus.size()) + " GPUs";
  f.kind = held ? "idle_gpus_held" : "low_utilization";
  const MicroUsd idle_micros_per_hour = meter::scale_micros(t.micros_per_hour, idle_share);
  const std::int64_t nano_per_month = meter::nano_usd_per_month_at(idle_micros_per_hour);
  f.severity = severity_of(nano_per_month);
  f.at_stake_ns = static_cast<std::int64_t>(std::llround(t.gpu_seconds * idle_share * 1e9));
  f.cost_nano_usd = meter::micros_to_nanos(t.idle_cost);
  f.nano_usd_per_month = nano_per_month;
  f.summary = held ? fmt::format(
                         "holds {} that stayed idle for {:.0f}% of what it cost so far "
                         "({}/h now)",
                         gpus, idle_share * 100, util::format_micros(idle_micros_per_hour))
                   : fmt::format("{} idle for {:.0f}% of what it cost so far ({}/h of idle time now)", gpus,
                                 idle_share * 100, util::format_micros(idle_micros_per_hour));
  f.action = held ? std::string(
                        "stop the process or release its GPUs if it has finished or hangs (a notebook "
                        "kernel or a stuck rank still holds GPU memory)")
                  : std::string(
                        "profile a few steps (`gpumeter trace`) for input-bound or launch-bound time; "
                        "more DataLoader workers or a larger batch fill the GPU");
  f.evidence.push_back({"idle_share", idle_share});
  f.evidence.push_back({"cost_usd", util::micros_to_usd(t.cost)});
  f.evidence.push_back({"usd_per_hour", util::micros_to_usd(t.micros_per_hour)});
  f.evidence.push_back({"gpus", static_cast<std::int64_t>(t.gpus.size())});
  out.push_back(std::move(f));
  return out;
}

}  // namespace gm::agent
