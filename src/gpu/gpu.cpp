#include "gpu/gpu.h"

namespace gm {

const char* to_string(DeviceState s) {
  switch (s) {
    case DeviceState::ok: return "ok";
    case DeviceState::lost: return "lost";
    case DeviceState::unresponsive: return "unresponsive";
  }
  return "ok";
}

const char* to_string(EnergyMethod m) {
  switch (m) {
    case EnergyMethod::counter: return "counter";
    case EnergyMethod::power_integration: return "power_integration";
    case EnergyMethod::none: return "none";
  }
  return "none";
}

EnergyMethod energy_method(const Capabilities& caps) {
  if (caps.energy_counter) return EnergyMethod::counter;
  if (caps.power) return EnergyMethod::power_integration;
  return EnergyMethod::none;
}

Result<std::unique_ptr<GpuBackend>> open_gpu_backend(const GpuBackendOptions& options) { return open_nvml(options); }

}  // namespace gm
