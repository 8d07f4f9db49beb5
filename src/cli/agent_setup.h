#pragma once
// Shared by `agent` and `top`: price of every device from the pricing flags.
#include <optional>
#include <vector>

#include "gpu/gpu.h"
#include "meter/meter.h"
#include "util/result.h"

namespace gm::cli {

/// Price per device (nullopt for a GPU with no known price); error when explicit pricing flags fail.
Result<std::vector<std::optional<PriceQuote>>> agent_prices(const PricingOptions& pricing, const GpuBackend& backend);

}  // namespace gm::cli
