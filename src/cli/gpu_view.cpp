#include "cli/gpu_view.h"

#include "sys/proc.h"

namespace gm::cli {

Result<GpuView> build_gpu_view(GpuBackend& backend, const PricingOptions& pricing) {
  (void)pricing;
  GpuView view;
  ProcReader procs;
  for (const DeviceInfo& info : backend.devices()) {
    DeviceView v;
    v.info = info;
    v.caps = backend.capabilities(info.index);
    v.sample = backend.sample(info.index);
    v.energy_method = energy_method(v.caps);
    for (const ProcessSample& p : v.sample.processes) {
      ProcessView pv;
      pv.sample = p;
      if (auto pi = procs.read(p.pid)) pv.name = pi->comm;
      v.processes.push_back(std::move(pv));
    }
    view.devices.push_back(std::move(v));
  }
  return view;
}

}  // namespace gm::cli
