// The inputs of own hardware vs cloud from the catalog (the money itself is meter's `compute_tco`).
#include <fmt/format.h>

#include "plan/plan.h"

namespace gm::plan {

Result<TcoInput> resolve_tco_input(const catalog::Catalog& catalog, const std::string& gpu_name, TcoInput in,
                                   std::optional<double> gpu_power_w,
                                   std::optional<double> cloud_usd_per_gpu_hour, std::optional<double> pue) {
  const catalog::GpuSpec* gpu = catalog.find_gpu(gpu_name);
  if (!gpu) {
    const std::string close = catalog.suggest_gpu(gpu_name);
    return make_error(ErrorKind::usage, fmt::format("--gpu: unknown GPU '{}'{}", gpu_name,
                                                    close.empty() ? "" : " (did you mean: " + close + "?)"));
  }
  in.gpu = gpu->id;
  if (gpu_power_w)
    in.gpu_power_w = *gpu_power_w;
  else if (gpu->tdp_w)
    in.gpu_power_w = *gpu->tdp_w;
  else
    return make_error(ErrorKind::usage,
                      fmt::format("{}: no TDP in the catalog; give --gpu-power-w", gpu->id));
  if (pue) in.pue = *pue;
  if (cloud_usd_per_gpu_hour) {
    in.cloud_usd_per_gpu_hour = *cloud_usd_per_gpu_hour;
    in.cloud_source = "--cloud-usd-per-gpu-hour";
  } else if (auto ref = catalog.reference_price(gpu->id)) {
    in.cloud_usd_per_gpu_hour = ref->usd_per_gpu_hour;
    in.cloud_source = fmt::format("catalog median on-demand over {} offers", ref->offers);
  } else {
    return make_error(
        ErrorKind::usage,
        fmt::format("{}: no on-demand offer in the catalog; give --cloud-usd-per-gpu-hour", gpu->id));
  }
  return in;
}

}  // namespace gm::plan
