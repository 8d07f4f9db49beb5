#include "meter/meter.h"

namespace gm::meter {

PricingContext::PricingContext(catalog::Catalog catalog, PricingOptions options,
                               std::unique_ptr<InstanceDetector> detector)
    : catalog_(std::move(catalog)), options_(std::move(options)), detector_(std::move(detector)) {}

Result<PricingContext> PricingContext::open(PricingOptions options,
                                            std::unique_ptr<InstanceDetector> detector) {
  auto catalog = catalog::load_catalog(options.catalog_override);
  if (!catalog) return catalog.error();
  return PricingContext(std::move(*catalog), std::move(options), std::move(detector));
}

bool PricingContext::explicit_price() const {
  return options_.price_usd_per_gpu_hour || options_.offer || options_.config_path;
}

Result<DevicePrice> PricingContext::price_for(const std::optional<std::string>& device_name) {
  const std::string key = device_name.value_or("");
  if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  auto quote = resolve_price(options_, catalog_, device_name, detector_.get());
  DevicePrice price;
  if (quote) {
    price.quote = std::move(*quote);
  } else {
    if (explicit_price() || quote.error().kind == ErrorKind::usage) {
      Error e = quote.error();
      e.kind = ErrorKind::usage;
      return e;
    }
    price.unpriced_reason = quote.error().message;
  }
  cache_.emplace(key, price);
  return price;
}

const catalog::GpuSpec* PricingContext::gpu_for(std::string_view device_name, std::string_view vendor) const {
  if (const catalog::GpuSpec* g = catalog_.gpu_for_device_name(device_name, vendor)) return g;
  return catalog_.find_gpu(device_name);
}

}  // namespace gm::meter
