#include "cli/gpu_view.h"

#include <chrono>
#include <thread>

#include "catalog/catalog.h"
#include "sys/proc.h"

namespace gm::cli {

Result<GpuView> build_gpu_view(GpuBackend& backend, PricingContext& prices) {
  GpuView view;
  ProcReader procs;
  // GPM activity is measured between two samples: the backend took the first when it opened the device, so
  // one GPM window passes before the sample shown.
  bool any_gpm = false;
  for (const DeviceInfo& info : backend.devices()) any_gpm = any_gpm || backend.capabilities(info.index).gpm;
  if (any_gpm) std::this_thread::sleep_for(std::chrono::milliseconds(kGpmWindowMs));
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
    std::optional<std::string> device_name;
    if (!info.name.empty()) device_name = info.name;
    if (device_name) {
      if (const GpuSpec* spec = prices.catalog().gpu_for_device_name(*device_name, backend.vendor()))
        v.catalog_gpu = spec->id;
    }
    // A bad --offer or --config is the user's error; a GPU without a catalog price is just unpriced.
    auto price = prices.price_for(device_name);
    if (!price) return price.error();
    if (!price->quote) {
      if (view.pricing_error.empty()) view.pricing_error = price->unpriced_reason;
    } else if (price->quote->origin != PriceOrigin::none) {
      v.price_usd_per_hour = price->quote->usd_per_gpu_hour();
      v.price_source = price->quote->source;
    }
    view.devices.push_back(std::move(v));
  }
  return view;
}

}  // namespace gm::cli
