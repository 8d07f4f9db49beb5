#pragma once
// What `gpus` shows of each device: one sample, process names, catalog GPU and price; its text and JSON.
#include <optional>
#include <string>
#include <vector>

#include "gpu/gpu.h"
#include "meter/meter.h"
#include "util/result.h"

namespace gm::report {

/// A process on a device with its name from /proc (nullopt when it cannot be read).
struct ProcessView {
  gpu::ProcessSample sample;
  std::optional<std::string> name;
};

/// One device as shown.
struct DeviceView {
  gpu::DeviceInfo info;
  gpu::Capabilities caps;
  gpu::DeviceSample sample;
  gpu::EnergyMethod energy_method = gpu::EnergyMethod::none;
  std::vector<ProcessView> processes;
  std::optional<std::string> catalog_gpu;    ///< catalog GPU id for the NVML name
  std::optional<double> price_usd_per_hour;  ///< per-GPU price
  std::optional<std::string> price_source;
};

struct GpuView {
  std::vector<DeviceView> devices;
  std::string pricing_error;  ///< why no price could be resolved ("" when fine)
};

/// How long `gpus` and `doctor` measure GPM activity before showing it (ms).
inline constexpr int kGpmWindowMs = 250;

/// Samples every device of `backend` once and resolves catalog GPU and price. Errors only for bad
/// pricing flags (usage / not_found).
Result<GpuView> build_gpu_view(gpu::GpuBackend& backend, meter::PricingContext& prices);

/// `gpus --json`: the driver version and every device with its readings, processes and price.
std::string render_gpus_json(const GpuView& view, const std::optional<std::string>& driver_version);
/// `gpus`: the driver line, the device table, price sources and errors, and the process table.
std::string render_gpus_text(const GpuView& view, const std::optional<std::string>& driver_version);

}  // namespace gm::report
