#pragma once
// RFC 4180 CSV: quoted fields, doubled quotes, CRLF; rows keep their 1-based line number for messages.
#include <string>
#include <string_view>
#include <vector>

#include "util/result.h"

namespace gm::util {

/// One CSV record with the line it started on.
struct CsvRow {
  std::size_t line = 0;
  std::vector<std::string> fields;
};

/// A parsed CSV file: header names and rows (rows of the wrong width are errors).
struct CsvTable {
  std::vector<std::string> header;
  std::vector<CsvRow> rows;
  /// Index of a header column, or -1.
  int column(std::string_view name) const;
};

/// Parses CSV text; `origin` (a file name) is used in error messages ("prices.csv:12: ...").
Result<CsvTable> parse_csv(std::string_view text, std::string_view origin);
/// Quotes a field when needed.
std::string csv_escape(std::string_view field);

}  // namespace gm::util
