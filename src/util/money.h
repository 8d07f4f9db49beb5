#pragma once
// Money is integer micro-dollars in the meter and the ledger; doubles only for display and forecasts.
#include <cmath>
#include <cstdint>

namespace gm {

/// Micro-dollars (1e-6 USD).
using MicroUsd = std::int64_t;

inline constexpr MicroUsd kMicrosPerUsd = 1'000'000;

/// 128-bit integer for exact intermediate products (GCC/Clang extension).
__extension__ typedef __int128 Int128;

/// Rounds a dollar amount to the nearest micro-dollar.
inline MicroUsd usd_to_micros(double usd) { return static_cast<MicroUsd>(std::llround(usd * 1e6)); }
/// Converts micro-dollars to dollars for display.
inline double micros_to_usd(MicroUsd micros) { return static_cast<double>(micros) / 1e6; }

/// Cost of `duration_ms` at `price_micros_per_hour`, floor-rounded, exact in integers (128-bit product).
inline MicroUsd cost_for_ms(MicroUsd price_micros_per_hour, std::int64_t duration_ms) {
  const Int128 p = static_cast<Int128>(price_micros_per_hour) * duration_ms;
  return static_cast<MicroUsd>(p / 3'600'000);
}

}  // namespace gm
