#include "util/units.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <vector>

namespace gm::util {

std::string to_lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const bool same = std::tolower(static_cast<unsigned char>(a[i - 1])) ==
                        std::tolower(static_cast<unsigned char>(b[j - 1]));
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (same ? 0 : 1)});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

Result<double> parse_number(std::string_view text) {
  text = trim(text);
  if (text.empty()) return make_error(ErrorKind::usage, "empty number");
  std::string s(text);
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || errno != 0 || !std::isfinite(v))
    return make_error(ErrorKind::usage, fmt::format("'{}' is not a number", text));
  if (v < 0) return make_error(ErrorKind::usage, fmt::format("'{}' must not be negative", text));
  return v;
}

Result<std::int64_t> parse_duration_ms(std::string_view text) {
  text = trim(text);
  if (text.empty()) return make_error(ErrorKind::usage, "empty duration");
  double total_ms = 0;
  std::size_t i = 0;
  bool any = false;
  while (i < text.size()) {
    std::size_t j = i;
    while (j < text.size() && (std::isdigit(static_cast<unsigned char>(text[j])) || text[j] == '.')) ++j;
    if (j == i) return make_error(ErrorKind::usage, fmt::format("'{}' is not a duration (try 90s, 15m, 2h)", text));
    const std::string number(text.substr(i, j - i));
    char* number_end = nullptr;
    const double v = std::strtod(number.c_str(), &number_end);
    if (number_end != number.c_str() + number.size())
      return make_error(ErrorKind::usage, fmt::format("'{}' is not a duration (try 90s, 15m, 2h)", text));
    std::size_t k = j;
    while (k < text.size() && std::isalpha(static_cast<unsigned char>(text[k]))) ++k;
    const std::string unit = to_lower(text.substr(j, k - j));
    double mult = 0;
    if (unit.empty() || unit == "s") mult = 1000;
    else if (unit == "ms") mult = 1;
    else if (unit == "m" || unit == "min") mult = 60'000;
    else if (unit == "h") mult = 3'600'000;
    else if (unit == "d") mult = 86'400'000;
    else return make_error(ErrorKind::usage, fmt::format("unknown unit '{}' in duration '{}'", unit, text));
    if (unit.empty() && k != text.size())
      return make_error(ErrorKind::usage, fmt::format("'{}' is not a duration", text));
    total_ms += v * mult;
    any = true;
    i = k;
  }
  if (!any) return make_error(ErrorKind::usage, fmt::format("'{}' is not a duration", text));
  // A century is longer than anything gpumeter meters; beyond it the milliseconds would overflow.
  if (!(total_ms <= 100.0 * 365 * 86'400'000))
    return make_error(ErrorKind::usage, fmt::format("'{}' is too long a duration (at most 100 years)", text));
  return static_cast<std::int64_t>(std::llround(total_ms));
}

Result<double> parse_percent(std::string_view text) {
  text = trim(text);
  if (!text.empty() && text.back() == '%') text.remove_suffix(1);
  auto v = parse_number(text);
  if (!v) return make_error(ErrorKind::usage, fmt::format("'{}' is not a percentage", text));
  if (*v > 100) return make_error(ErrorKind::usage, fmt::format("{}% is over 100%", text));
  return *v;
}

std::string format_duration_s(double seconds) {
  if (seconds < 60) return fmt::format("{:.1f}s", seconds);
  const auto total = static_cast<long long>(std::llround(seconds));
  const long long h = total / 3600, m = (total % 3600) / 60, s = total % 60;
  if (h > 0) return fmt::format("{}h {:02}m {:02}s", h, m, s);
  return fmt::format("{}m {:02}s", m, s);
}

std::string format_bytes(std::uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  if (u == 0) return fmt::format("{} B", bytes);
  return fmt::format("{:.1f} {}", v, units[u]);
}

}  // namespace gm::util
