#pragma once
// Enum <-> text through one table per enum: the name of a value, the value of a name, the list of names for a
// message. A table replaces a switch that returns a string per case (and its inverse, where text comes in).
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace gm {

/// One row of an enum's text table.
template <class E>
struct EnumText {
  E value;
  const char* text;  ///< a literal: callers hand it to printf-style APIs
};

/// The text of `value` in `table`; `fallback` when the table lacks it.
template <class E, std::size_t N>
constexpr const char* enum_text(const EnumText<E> (&table)[N], E value, const char* fallback = "") {
  for (const auto& row : table)
    if (row.value == value) return row.text;
  return fallback;
}

/// The value whose text is `text` (exactly); nullopt when none is.
template <class E, std::size_t N>
constexpr std::optional<E> enum_from_text(const EnumText<E> (&table)[N], std::string_view text) {
  for (const auto& row : table)
    if (std::string_view(row.text) == text) return row.value;
  return std::nullopt;
}

/// "a, b, c": the texts of `table` in its order, for "expected one of ..." messages.
template <class E, std::size_t N>
std::string enum_texts(const EnumText<E> (&table)[N]) {
  std::string out;
  for (const auto& row : table) {
    if (!out.empty()) out += ", ";
    out += row.text;
  }
  return out;
}

}  // namespace gm
