// Own hardware vs cloud over N years, with the break-even utilization (`gpumeter plan tco`).
#include <fmt/format.h>

#include <cmath>

#include "meter/meter.h"

namespace gm::meter {

Result<TcoResult> compute_tco(const TcoInput& in) {
  auto positive = [](double v, const char* flag) -> Result<void> {
    if (!(v > 0) || !std::isfinite(v))
      return make_error(ErrorKind::usage, fmt::format("{} must be a positive number", flag));
    return ok_result();
  };
  auto non_negative = [](double v, const char* flag) -> Result<void> {
    if (!(v >= 0) || !std::isfinite(v))
      return make_error(ErrorKind::usage, fmt::format("{} must not be negative", flag));
    return ok_result();
  };
  if (in.gpus <= 0) return make_error(ErrorKind::usage, "--gpus must be a positive number");
  GM_TRY_VOID(positive(in.years, "--years"));
  GM_TRY_VOID(positive(in.capex_usd, "--capex-usd"));
  GM_TRY_VOID(positive(in.gpu_power_w, "--gpu-power-w"));
  GM_TRY_VOID(positive(in.pue, "--pue"));
  GM_TRY_VOID(positive(in.cloud_usd_per_gpu_hour, "--cloud-usd-per-gpu-hour"));
  GM_TRY_VOID(non_negative(in.usd_per_kwh, "--usd-per-kwh"));
  GM_TRY_VOID(non_negative(in.ops_usd_per_year, "--ops-usd-per-year"));
  GM_TRY_VOID(non_negative(in.host_power_w, "--host-power-w"));
  if (!(in.idle_power_fraction >= 0 && in.idle_power_fraction <= 1))
    return make_error(ErrorKind::usage, "--idle-power must be a fraction in [0, 1]");
  if (!(in.utilization > 0 && in.utilization <= 1))
    return make_error(ErrorKind::usage, "--utilization must be in (0, 1], e.g. 0.6");
  if (in.pue < 1) return make_error(ErrorKind::usage, "--pue must be at least 1");

  TcoResult r;
  r.hours = in.years * 8760.0;
  // Power drawn at utilization u: idle share all the time plus the rest while busy; host likewise.
  const double full_kw = (in.gpus * in.gpu_power_w + in.host_power_w) / 1000.0;
  const double idle_kw = full_kw * in.idle_power_fraction;
  const double usd_per_kwh_at_wall = in.pue * in.usd_per_kwh;
  auto own_total = [&](double u) {
    const double kwh = (idle_kw + (full_kw - idle_kw) * u) * r.hours * in.pue;
    return in.capex_usd + in.ops_usd_per_year * in.years + kwh * in.usd_per_kwh;
  };
  r.own_energy_kwh = (idle_kw + (full_kw - idle_kw) * in.utilization) * r.hours * in.pue;
  r.own_energy_usd = r.own_energy_kwh * in.usd_per_kwh;
  r.own_ops_usd = in.ops_usd_per_year * in.years;
  r.own_total_usd = own_total(in.utilization);
  r.cloud_gpu_hours = in.gpus * r.hours * in.utilization;
  r.cloud_total_usd = r.cloud_gpu_hours * in.cloud_usd_per_gpu_hour;
  r.own_usd_per_used_gpu_hour = r.own_total_usd / r.cloud_gpu_hours;
  // own(u) = A + B·u, cloud(u) = C·u  →  u* = A / (C − B).
  const double a = own_total(0.0);
  const double b = (full_kw - idle_kw) * r.hours * usd_per_kwh_at_wall;
  const double c = in.gpus * r.hours * in.cloud_usd_per_gpu_hour;
  if (c > b) {
    const double u = a / (c - b);
    if (u <= 1.0) r.break_even_utilization = u;
  }
  return r;
}

}  // namespace gm::meter
