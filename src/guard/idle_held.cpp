// The idle_gpus_held watch: idle GPUs whose memory the job holds, priced at the run's burn rate.
#include "guard/idle_held.h"

#include <fmt/format.h>

#include "util/units.h"

namespace gm::guard {

void IdleHeldWatch::on_interval(const Tick& tick) {
  if (!st_.cfg.idle_held_ms || !st_.cfg.telemetry) return;
  bool held = false;
  for (const auto& d : st_.meter->latest())
    if (st_.gpu_match->job_holds_memory(d)) held = true;
  const auto idle = st_.meter->idle_for_ms(tick.now_ns);
  if (!held || !idle || *idle < *st_.cfg.idle_held_ms) {
    idle_held_ms_.reset();
    recorded_ = false;
    return;
  }
  idle_held_ms_ = *idle;
  if (recorded_) return;
  recorded_ = true;
  st_.record_action(
      store::ActionKind::idle_gpus_held,
      fmt::format("the GPUs have been under {:.0f}% utilization for {} while the job holds memory "
                  "on them: {}/h for nothing (free the memory or shut the kernel down)",
                  meter::kIdleUtilPct, util::format_duration_s(static_cast<double>(*idle) / 1000.0),
                  util::format_usd(meter::usd_per_hour_of_burn(st_.burn_usd_per_s()))),
      tick.now_ns, tick.spent_micros);
}

void IdleHeldWatch::fill(StatusSnapshot& s) const {
  if (!idle_held_ms_) return;
  s.idle_held_s = static_cast<double>(*idle_held_ms_) / 1000.0;
  if (st_.cfg.price) s.idle_held_usd_per_h = meter::usd_per_hour_of_burn(st_.burn_usd_per_s());
}

}  // namespace gm::guard
