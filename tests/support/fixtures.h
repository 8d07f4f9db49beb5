#pragma once
// Hand-made domain values shared by unit tests.
#include <string>

#include "gpu/gpu.h"
#include "meter/meter.h"
#include "util/money.h"

namespace gm::test {

/// GPU `index` of a test node: an 80 GiB H100 named "GPU-<index>".
inline DeviceInfo h100_info(unsigned index) {
  DeviceInfo info;
  info.index = index;
  info.name = "NVIDIA H100 80GB HBM3";
  info.uuid = "GPU-" + std::to_string(index);
  info.memory_total_bytes = 80ull << 30;
  return info;
}

/// A one-GPU in-memory backend whose every sample reads `util_pct` and 1 GiB used.
inline StaticGpuBackend one_static_gpu(std::uint32_t util_pct) {
  StaticGpuBackend b;
  b.infos.push_back(h100_info(0));
  b.caps.emplace_back();
  DeviceSample s;
  s.utilization_pct = util_pct;
  s.memory_used_bytes = 1ull << 30;
  b.samples.push_back(s);
  return b;
}

/// A price as `--price usd_per_hour` gives it.
inline PriceQuote flag_price(double usd_per_hour) {
  PriceQuote q;
  q.micros_per_gpu_hour = usd_to_micros(usd_per_hour);
  q.origin = PriceOrigin::flag_price;
  q.source = "--price";
  return q;
}

}  // namespace gm::test
