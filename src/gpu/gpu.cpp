#include "gpu/gpu.h"

#include "util/enum_text.h"

namespace gm::gpu {

using util::enum_text;
using util::EnumText;

constexpr EnumText<DeviceState> kDeviceStates[] = {
    {DeviceState::ok, "ok"}, {DeviceState::lost, "lost"}, {DeviceState::unresponsive, "unresponsive"}};

const char* to_string(DeviceState s) {
  return enum_text(kDeviceStates, s, "ok");
}

constexpr EnumText<EnergyMethod> kEnergyMethods[] = {{EnergyMethod::counter, "counter"},
                                                     {EnergyMethod::power_integration, "power_integration"},
                                                     {EnergyMethod::none, "none"}};

const char* to_string(EnergyMethod m) {
  return enum_text(kEnergyMethods, m, "none");
}

EnergyMethod energy_method(const Capabilities& caps) {
  if (caps.energy_counter) return EnergyMethod::counter;
  if (caps.power) return EnergyMethod::power_integration;
  return EnergyMethod::none;
}

Result<std::unique_ptr<GpuBackend>> open_gpu_backend(const GpuBackendOptions& options) {
  return open_nvml(options);
}

}  // namespace gm::gpu
