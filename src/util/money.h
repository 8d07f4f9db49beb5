#pragma once
// Money is integer micro-dollars in the meter and the ledger; doubles only for display and forecasts.
// This header also holds the one money formatter (format_usd and its thin variants) and the exact decimal
// text machine formats use (usd_decimal), so no module writes dollars its own way.
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "util/result.h"

namespace gm::util {

/// Micro-dollars (1e-6 USD).
using MicroUsd = std::int64_t;

inline constexpr MicroUsd kMicrosPerUsd = 1'000'000;

/// Nano-dollars (1e-9 USD): the finer unit of the findings' figures and of the providers' price lists.
using NanoUsd = std::int64_t;
/// Pico-dollars (1e-12 USD): the cost of single kernels of a trace.
using PicoUsd = std::int64_t;

inline constexpr NanoUsd kNanosPerUsd = 1'000'000'000;

/// 128-bit integer for exact intermediate products (GCC/Clang extension).
__extension__ typedef __int128 Int128;

/// Rounds a dollar amount to the nearest micro-dollar.
inline MicroUsd usd_to_micros(double usd) {
  return static_cast<MicroUsd>(std::llround(usd * 1e6));
}
/// Converts micro-dollars to dollars for display.
inline double micros_to_usd(MicroUsd micros) {
  return static_cast<double>(micros) / 1e6;
}
/// Converts nano-dollars to dollars for display.
inline double nanos_to_usd(NanoUsd nanos) {
  return static_cast<double>(nanos) / 1e9;
}
/// Converts pico-dollars to dollars for display.
inline double picos_to_usd(PicoUsd picos) {
  return static_cast<double>(picos) / 1e12;
}
/// Rounds a dollar amount to the nearest nano-dollar.
inline NanoUsd usd_to_nanos(double usd) {
  return static_cast<NanoUsd>(std::llround(usd * 1e9));
}

/// Cost of `duration_ms` at `price_micros_per_hour`, floor-rounded, exact in integers (128-bit product).
inline MicroUsd cost_for_ms(MicroUsd price_micros_per_hour, std::int64_t duration_ms) {
  const Int128 p = static_cast<Int128>(price_micros_per_hour) * duration_ms;
  return static_cast<MicroUsd>(p / 3'600'000);
}

/// Parses a dollar amount written in decimal ("12", "12.50", "$0.000001") into micro-dollars exactly (no
/// binary rounding; digits past the sixth decimal round half up). Error (usage) on anything else, negative
/// amounts included.
Result<MicroUsd> parse_usd_micros(std::string_view text);

/// The exact micro-dollars of an amount that arrived as a binary double (a JSON number): its shortest decimal
/// text, which is what the writer wrote (Python's json and fmt both write the shortest text that reads back
/// the same), through parse_usd_micros; a tiny amount written with an exponent goes through its 7-decimal
/// text. Error (usage) for a negative, infinite or too large amount.
Result<MicroUsd> usd_micros_of_number(double usd);

/// The money formatter for people: "$1.23", "$0.004", "$12,345.67", "$0.0000042" (precision suited to the
/// magnitude); `plus` writes "+" before amounts >= 0 (differences).
std::string format_usd(double usd, bool plus = false);
/// format_usd of integer micro-dollars.
inline std::string format_micros(MicroUsd micros, bool plus = false) {
  return format_usd(micros_to_usd(micros), plus);
}
/// format_usd of integer nano-dollars.
inline std::string format_nanos(NanoUsd nanos, bool plus = false) {
  return format_usd(nanos_to_usd(nanos), plus);
}
/// format_usd, or `none` (default "-") when there is no amount.
std::string format_usd_or(const std::optional<double>& usd, std::string_view none = "-");

/// The exact decimal text of micro-dollars for machine formats ("12.5", "0.000042", "-3"; with `six_decimals`
/// "12.500000"): no binary rounding.
std::string usd_decimal(MicroUsd micros, bool six_decimals = false);

}  // namespace gm::util

// Money's one unit, named in every layer's signatures: re-exported into gm like Result (util/result.h).
namespace gm {
using util::MicroUsd;
}  // namespace gm
