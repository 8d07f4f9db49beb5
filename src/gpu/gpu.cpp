#include "gpu/gpu.h"

#include "util/enum_text.h"

namespace gm::gpu {

constexpr util::EnumText<DeviceState> kDeviceStates[] = {
    {DeviceState::ok, "ok"}, {DeviceState::lost, "lost"}, {DeviceState::unresponsive, "unresponsive"}};

const char* to_string(DeviceState s) {
  return util::enum_text(kDeviceStates, s, "ok");
}

constexpr util::EnumText<EnergyMethod> kEnergyMethods[] = {
    {EnergyMethod::counter, "counter"},
    {EnergyMethod::power_integration, "power_integration"},
    {EnergyMethod::none, "none"}};

const char* to_string(EnergyMethod m) {
  return util::enum_text(kEnergyMethods, m, "none");
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
