// Mean GPM activity of a GPU while it works (the run report's per-GPU activity), and MFU.
#include <algorithm>
#include <iterator>

#include "meter/run_meter.h"

namespace gm::meter {
namespace {

constexpr std::optional<double> store::GpmPct::*kFields[] = {
    &store::GpmPct::sm_active,   &store::GpmPct::sm_occupancy, &store::GpmPct::tensor_active,
    &store::GpmPct::fp32_active, &store::GpmPct::fp16_active,  &store::GpmPct::fp64_active,
    &store::GpmPct::dram_bw_util};

}  // namespace

bool interval_did_work(std::optional<double> utilization_pct, const store::GpmPct& gpm) {
  if (!utilization_pct || *utilization_pct < kIdleUtilPct) return false;
  return !gpm.sm_active || *gpm.sm_active >= kWorkSmActivePct;
}

void ActivityMean::add(const store::GpmPct& gpm, bool working) {
  if (!working) return;
  bool any = false;
  for (std::size_t i = 0; i < std::size(kFields); ++i) {
    if (const auto& v = gpm.*kFields[i]) {
      sum_[i] += *v;
      ++n_[i];
      any = true;
    }
  }
  if (any) ++intervals_;
}

store::GpmPct ActivityMean::mean() const {
  store::GpmPct out;
  for (std::size_t i = 0; i < std::size(kFields); ++i) {
    if (n_[i] > 0) out.*kFields[i] = sum_[i] / static_cast<double>(n_[i]);
  }
  return out;
}

store::GpmPct gpm_record(const gpu::GpmMetrics& m) {
  return store::GpmPct{m.sm_active_pct,   m.sm_occupancy_pct, m.tensor_active_pct, m.fp32_active_pct,
                       m.fp16_active_pct, m.fp64_active_pct,  m.dram_bw_util_pct};
}

std::optional<double> model_flops_utilization(double tokens, double flops_per_token,
                                              double peak_tflops_per_gpu, std::size_t gpus, double seconds) {
  if (tokens < 0 || flops_per_token <= 0 || peak_tflops_per_gpu <= 0 || gpus == 0 || seconds <= 0)
    return std::nullopt;
  return tokens * flops_per_token / (peak_tflops_per_gpu * 1e12 * static_cast<double>(gpus) * seconds);
}

std::optional<std::int64_t> earliest_busy_ms(const std::vector<GpuUsage>& gpus) {
  std::optional<std::int64_t> first;
  for (const auto& g : gpus)
    if (g.first_busy_ms) first = std::min(first.value_or(*g.first_busy_ms), *g.first_busy_ms);
  return first;
}

}  // namespace gm::meter
