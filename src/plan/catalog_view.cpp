// Joins the catalog's offers with their GPU spec, billing rule, carbon intensity and PUE.
#include "plan/plan.h"

namespace gm::plan {

std::vector<OfferContext> offers_from_catalog(const catalog::Catalog& catalog) {
  std::vector<OfferContext> out;
  out.reserve(catalog.offers().size());
  for (const auto& o : catalog.offers()) {
    const catalog::GpuSpec* gpu = catalog.find_gpu(o.gpu);
    if (!gpu) continue;
    OfferContext c;
    c.offer = o;
    c.gpu = *gpu;
    c.billing = catalog.billing_rule(o.provider);
    if (const catalog::CarbonIntensity* ci = catalog.carbon_for(o.provider, o.region)) {
      c.carbon_g_per_kwh = ci->g_co2e_per_kwh;
      c.carbon_dataset = ci->dataset;
    }
    if (auto p = catalog.pue_for(o.provider, o.region)) c.pue = p->pue;
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace gm::plan
