#pragma once
// Rendering of `gpumeter prices`: the offers `select_offers` chose, as a text table or a JSON document.
#include <string>
#include <vector>

#include "catalog/catalog.h"
#include "meter/meter.h"

namespace gm::report {

/// `prices --json`: {"offers": [...]} with the catalog's and your own $/GPU-hour (null where unknown).
std::string render_prices_json(const std::vector<const catalog::Offer*>& rows, bool spot,
                               const meter::ContractRates& rates);
/// `prices`: the table (a YOUR $/GPU-H column when `rates` has any), the count, sources and flag notes;
/// `every_region`: the rows are one per region (--all-regions or --region), not each instance's cheapest.
std::string render_prices_text(const std::vector<const catalog::Offer*>& rows, bool spot,
                               const meter::ContractRates& rates, bool every_region);

}  // namespace gm::report
