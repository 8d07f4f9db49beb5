#include "cli/gpu_view.h"

#include "catalog/catalog.h"
#include "sys/proc.h"

namespace gm::cli {

Result<GpuView> build_gpu_view(GpuBackend& backend, const PricingOptions& pricing) {
  GpuView view;
  auto catalog = Catalog::builtin();
  if (!catalog) {
    view.pricing_error = catalog.error().message;
  } else if (pricing.catalog_override) {
    auto merged = catalog->merge_offers_file(*pricing.catalog_override);
    if (!merged) return merged.error();
  }
  DmiInstanceDetector detector;
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
    if (catalog) {
      std::optional<std::string> nvml_name;
      if (!info.name.empty()) nvml_name = info.name;
      if (nvml_name) {
        if (const GpuSpec* spec = catalog->gpu_for_nvml_name(*nvml_name)) v.catalog_gpu = spec->id;
      }
      auto quote = resolve_price(pricing, *catalog, nvml_name, &detector);
      if (!quote) {
        // A bad --offer or --config is the user's error; a GPU without a catalog price is just unpriced.
        if (quote.error().kind == ErrorKind::usage || pricing.offer || pricing.config_path) return quote.error();
        if (view.pricing_error.empty()) view.pricing_error = quote.error().message;
      } else if (quote->origin != PriceOrigin::none) {
        v.price_usd_per_hour = quote->usd_per_gpu_hour();
        v.price_source = quote->source;
      }
    }
    view.devices.push_back(std::move(v));
  }
  return view;
}

}  // namespace gm::cli
