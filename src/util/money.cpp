#include "util/money.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

namespace gm::util {

Result<MicroUsd> parse_usd_micros(std::string_view text) {
  const std::string_view original = text;
  auto bad = [&]() -> Result<MicroUsd> {
    return make_error(ErrorKind::usage,
                      fmt::format("'{}' is not an amount of USD (write it as 12, 12.50 or $0.25)", original));
  };
  if (!text.empty() && text.front() == '$') text.remove_prefix(1);
  if (text.empty()) return bad();
  MicroUsd whole = 0;
  std::size_t i = 0;
  constexpr MicroUsd kMaxWhole = std::numeric_limits<MicroUsd>::max() / kMicrosPerUsd - 1;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    whole = whole * 10 + (text[i] - '0');
    if (whole > kMaxWhole) return bad();
  }
  const std::size_t int_digits = i;
  MicroUsd frac = 0;
  std::size_t frac_digits = 0;
  bool round_up = false;
  if (i < text.size() && text[i] == '.') {
    for (++i; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i, ++frac_digits) {
      if (frac_digits < 6)
        frac = frac * 10 + (text[i] - '0');
      else if (frac_digits == 6)
        round_up = text[i] >= '5';
    }
  }
  if (i != text.size() || (int_digits == 0 && frac_digits == 0)) return bad();
  for (std::size_t d = std::min<std::size_t>(frac_digits, 6); d < 6; ++d) frac *= 10;
  return whole * kMicrosPerUsd + frac + (round_up ? 1 : 0);
}

Result<MicroUsd> usd_micros_of_number(double usd) {
  std::string text = fmt::format("{}", usd);
  if (text.find_first_of("eE") != std::string::npos && std::fabs(usd) < 1) text = fmt::format("{:.7f}", usd);
  return parse_usd_micros(text);
}

std::string format_usd(double usd, bool plus) {
  const double a = std::fabs(usd);
  const char* sign = usd < 0 ? "-" : plus ? "+" : "";
  std::string body;
  if (a >= 1000) {
    const std::string plain = fmt::format("{:.2f}", a);
    const std::size_t int_digits = plain.find('.');
    for (std::size_t i = 0; i < plain.size(); ++i) {
      if (i > 0 && i < int_digits && (int_digits - i) % 3 == 0) body.push_back(',');
      body.push_back(plain[i]);
    }
  } else if (a >= 1 || a == 0) {
    body = fmt::format("{:.2f}", a);
  } else if (a >= 0.01) {
    body = fmt::format("{:.3f}", a);
  } else {
    // Two significant digits at least, so a kernel's share of a cent is not printed as $0.000000.
    if (a < 1e-12) return fmt::format("{}<$0.000000000001", sign);
    const int decimals = std::clamp(static_cast<int>(std::ceil(-std::log10(a))) + 1, 6, 12);
    body = fmt::format("{:.{}f}", a, decimals);
  }
  return fmt::format("{}${}", sign, body);
}

std::string format_usd_or(const std::optional<double>& usd, std::string_view none) {
  return usd ? format_usd(*usd) : std::string(none);
}

std::string usd_decimal(MicroUsd micros, bool six_decimals) {
  const bool neg = micros < 0;
  const auto m =
      neg ? static_cast<unsigned long long>(-(micros + 1)) + 1 : static_cast<unsigned long long>(micros);
  std::string s = fmt::format("{}{}.{:06}", neg ? "-" : "", m / 1'000'000, m % 1'000'000);
  if (six_decimals) return s;
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s;
}

}  // namespace gm::util
