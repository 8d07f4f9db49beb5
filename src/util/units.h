#pragma once
// Parsing and formatting of durations, percentages and byte sizes (money: util/money.h); units in every name.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "util/money.h"
#include "util/result.h"

namespace gm::util {

/// Parses "90", "90s", "500ms", "15m", "2h", "1h30m", "7d" into milliseconds (bare number = seconds).
Result<std::int64_t> parse_duration_ms(std::string_view text);
/// Parses "80%" or "80" into a percentage in [0, 100] (error outside).
Result<double> parse_percent(std::string_view text);
/// Parses a non-negative decimal number ("3", "2.5", "1e9", "2e9"); error on anything else.
Result<double> parse_number(std::string_view text);
/// "1h 02m 03s", "4m 05s", "12.3s".
std::string format_duration_s(double seconds);
/// "80.0 GiB", "512 MiB".
std::string format_bytes(std::uint64_t bytes);
/// Closest candidates to `name` among `options` (case-insensitive edit distance), best first, at most `max`.
template <class Range>
std::string suggest_names(std::string_view name, const Range& options, std::size_t max = 3);
/// Case-insensitive Levenshtein distance.
std::size_t edit_distance(std::string_view a, std::string_view b);
/// Lower-cases ASCII.
std::string to_lower(std::string_view s);
/// Trims ASCII whitespace on both sides.
std::string_view trim(std::string_view s);

}  // namespace gm::util

#include <algorithm>
#include <vector>

namespace gm::util {
template <class Range>
std::string suggest_names(std::string_view name, const Range& options, std::size_t max) {
  std::vector<std::pair<std::size_t, std::string>> scored;
  const std::string lname = to_lower(name);
  for (const auto& o : options) {
    std::string s(o);
    std::string lo = to_lower(s);
    std::size_t d = edit_distance(lname, lo);
    if (lo.find(lname) != std::string::npos || lname.find(lo) != std::string::npos) d = std::min<std::size_t>(d, 1);
    scored.emplace_back(d, s);
  }
  std::stable_sort(scored.begin(), scored.end(), [](auto& a, auto& b) { return a.first < b.first; });
  std::string out;
  std::size_t n = 0;
  for (auto& [d, s] : scored) {
    if (n == max || d > std::max<std::size_t>(3, name.size() / 2)) break;
    if (!out.empty()) out += ", ";
    out += s;
    ++n;
  }
  return out;
}
}  // namespace gm::util
