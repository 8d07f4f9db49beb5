// libFuzzer target: the user's offers override file (--catalog FILE, same columns as data/offers.csv) merged
// over the built-in catalog. Any bytes: an error naming the file, or a catalog whose every price resolves to
// a positive, in-range micro-dollar quote and whose lookups do not crash.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "catalog/catalog.h"
#include "fuzz_util.h"
#include "meter/meter.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using gm::fuzz::check;
  static const gm::catalog::Catalog builtin = [] {
    auto c = gm::catalog::Catalog::builtin();
    if (!c) std::abort();
    return *c;
  }();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  gm::fuzz::MemFile file(text);
  gm::catalog::Catalog catalog = builtin;
  auto merged = catalog.merge_offers_file(file.path());
  if (!merged) {
    check(merged.error().message.find(file.path()) != std::string::npos);
    return 0;
  }
  std::size_t asked = 0;
  for (const auto& o : catalog.offers()) {
    if (!o.user_override) continue;
    for (bool spot : {false, true}) {
      const auto p = o.usd_per_gpu_hour(spot);
      if (!p || ++asked > 16) continue;
      check(*p >= 0 && *p <= gm::catalog::kMaxUsdPerGpuHour);
      gm::meter::PricingOptions options;
      options.offer = o.provider + ":" + o.instance + "@" + o.region + (spot ? ":spot" : ":ondemand");
      auto q = gm::meter::resolve_price(options, catalog, std::nullopt, nullptr);
      if (!q) continue;  // a name with ':' or '@' in it cannot be asked for on the command line
      check(q->micros_per_gpu_hour >= 0);
      const auto cost = gm::meter::billed_cost(*q, gm::meter::billed_seconds(3'600'000, q->billing), 8);
      check(cost >= 0);
    }
    (void)catalog.find_gpu(o.gpu);
    (void)catalog.find_offer_by_instance(o.instance);
  }
  for (const auto& g : catalog.gpus()) {
    if (auto ref = catalog.reference_price(g.id)) check(ref->usd_per_gpu_hour >= 0);
  }
  (void)catalog.newest_price_date();
  return 0;
}
