#include "gpu/nvml_gpm.h"

#include <algorithm>
#include <cmath>
#include <iterator>

namespace gm::gpu::nvml {
namespace {

/// The metrics gpumeter requests, in request order, with where each value goes.
struct Wanted {
  unsigned id;
  std::optional<double> GpmMetrics::*field;
};
constexpr Wanted kWanted[] = {
    {kGpmSmUtil, &GpmMetrics::sm_active_pct},
    {kGpmSmOccupancy, &GpmMetrics::sm_occupancy_pct},
    {kGpmAnyTensorUtil, &GpmMetrics::tensor_active_pct},
    {kGpmFp32Util, &GpmMetrics::fp32_active_pct},
    {kGpmFp16Util, &GpmMetrics::fp16_active_pct},
    {kGpmFp64Util, &GpmMetrics::fp64_active_pct},
    {kGpmDramBwUtil, &GpmMetrics::dram_bw_util_pct},
};

}  // namespace

GpmApi GpmApi::resolve(const Library& lib) {
  GpmApi api;
  api.query = lib.get<GpmQueryFn>("nvmlGpmQueryDeviceSupport");
  api.alloc = lib.get<GpmAllocFn>("nvmlGpmSampleAlloc");
  api.free = lib.get<GpmFreeFn>("nvmlGpmSampleFree");
  api.sample = lib.get<GpmSampleFn>("nvmlGpmSampleGet");
  api.mig_sample = lib.get<GpmMigSampleFn>("nvmlGpmMigSampleGet");
  api.metrics = lib.get<GpmMetricsFn>("nvmlGpmMetricsGet");
  return api;
}

bool GpmApi::usable() const {
  return query != nullptr && alloc != nullptr && free != nullptr && sample != nullptr && metrics != nullptr;
}

std::string GpmApi::missing() const {
  std::string out;
  auto add = [&out](bool absent, const char* name) {
    if (absent) out += (out.empty() ? "" : ", ") + std::string(name);
  };
  add(query == nullptr, "nvmlGpmQueryDeviceSupport");
  add(alloc == nullptr, "nvmlGpmSampleAlloc");
  add(free == nullptr, "nvmlGpmSampleFree");
  add(sample == nullptr, "nvmlGpmSampleGet");
  add(metrics == nullptr, "nvmlGpmMetricsGet");
  return out;
}

void fill_gpm_request(GpmMetricsGet& req, GpmSample first, GpmSample second) {
  req.version = kGpmMetricsGetVersion;
  req.num_metrics = static_cast<unsigned>(std::size(kWanted));
  req.sample1 = first;
  req.sample2 = second;
  for (std::size_t i = 0; i < std::size(kWanted); ++i) {
    req.metrics[i] = GpmMetric{};
    req.metrics[i].metric_id = kWanted[i].id;
    req.metrics[i].nvml_return = kErrorUnknown;
  }
}

GpmMetrics decode_gpm(const GpmMetricsGet& answer) {
  GpmMetrics out;
  const std::size_t n = std::min<std::size_t>(answer.num_metrics, std::size(kWanted));
  for (std::size_t i = 0; i < n; ++i) {
    const GpmMetric& m = answer.metrics[i];
    if (m.metric_id != kWanted[i].id || m.nvml_return != kSuccess || !std::isfinite(m.value)) continue;
    out.*(kWanted[i].field) = std::clamp(m.value, 0.0, 100.0);
  }
  return out;
}

}  // namespace gm::gpu::nvml
