#pragma once
// Enum <-> text through one table per enum: the name of a value, the value of a name, the list of names for a
// message. A table replaces a switch that returns a string per case (and its inverse, where text comes in).
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "util/result.h"

namespace gm::util {

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

// An enum whose values are text at the edges (the ledger, JSON, flags) declares its table once beside it,
// `constexpr const auto& enum_table(E) { return kTable; }`, found by argument-dependent lookup; these read
// it.

/// The text of `value` in its enum's table ("?" for a value the table lacks: a bug, never data).
template <class E>
constexpr const char* text_of(E value) {
  return enum_text(enum_table(E{}), value, "?");
}

/// The value whose text is `text` (exactly); nullopt when none is.
template <class E>
constexpr std::optional<E> value_of(std::string_view text) {
  return enum_from_text(enum_table(E{}), text);
}

/// The value whose text is `text`, else an error of `kind`: "WHAT 'TEXT' is not one of a, b, c".
template <class E>
Result<E> parse_enum(std::string_view text, std::string_view what, ErrorKind kind = ErrorKind::usage) {
  if (auto v = value_of<E>(text)) return *v;
  return make_error(
      kind, std::string(what) + " '" + std::string(text) + "' is not one of " + enum_texts(enum_table(E{})));
}

}  // namespace gm::util
