#pragma once
// Rendering of `gpumeter prices update`: what was fetched, what each sanity rule did, where it was written.
#include <string>

#include "prices/prices.h"

namespace gm::report {

/// Text (or JSON with stable keys) for an update's result; `catalog_path` is where the fetched catalog went
/// (or would go, with `written` false for --dry-run).
std::string render_price_update(const prices::UpdateResult& result, const std::string& catalog_path,
                                bool written, bool json);

}  // namespace gm::report
