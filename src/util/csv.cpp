#include "util/csv.h"

#include <fmt/format.h>

namespace gm::util {

int CsvTable::column(std::string_view name) const {
  for (std::size_t i = 0; i < header.size(); ++i)
    if (header[i] == name) return static_cast<int>(i);
  return -1;
}

Result<CsvTable> parse_csv(std::string_view text, std::string_view origin) {
  CsvTable table;
  std::vector<std::vector<std::string>> records;
  std::vector<std::size_t> lines;
  std::size_t line = 1;
  std::size_t i = 0;
  while (i < text.size()) {
    std::vector<std::string> fields;
    const std::size_t start_line = line;
    std::string field;
    bool done = false;
    while (!done) {
      field.clear();
      if (i < text.size() && text[i] == '"') {
        ++i;
        for (;;) {
          if (i >= text.size())
            return make_error(fmt::format("{}:{}: unterminated quoted field", origin, start_line));
          const char c = text[i++];
          if (c == '"') {
            if (i < text.size() && text[i] == '"') {
              field += '"';
              ++i;
            } else {
              break;
            }
          } else {
            if (c == '\n') ++line;
            field += c;
          }
        }
        if (i < text.size() && text[i] != ',' && text[i] != '\n' && text[i] != '\r')
          return make_error(fmt::format("{}:{}: text after a closing quote", origin, line));
      } else {
        while (i < text.size() && text[i] != ',' && text[i] != '\n' && text[i] != '\r') field += text[i++];
      }
      fields.push_back(field);
      if (i < text.size() && text[i] == ',') {
        ++i;
      } else {
        if (i < text.size() && text[i] == '\r') ++i;
        if (i < text.size() && text[i] == '\n') ++i;
        ++line;
        done = true;
      }
    }
    if (fields.size() == 1 && fields[0].empty()) continue;  // blank line
    if (!fields.empty() && !fields[0].empty() && fields[0][0] == '#') continue;  // comment line
    records.push_back(std::move(fields));
    lines.push_back(start_line);
  }
  if (records.empty()) return make_error(fmt::format("{}: empty file (no header row)", origin));
  table.header = std::move(records[0]);
  for (std::size_t r = 1; r < records.size(); ++r) {
    if (records[r].size() != table.header.size())
      return make_error(fmt::format("{}:{}: {} fields, the header has {}", origin, lines[r], records[r].size(),
                                    table.header.size()));
    table.rows.push_back(CsvRow{lines[r], std::move(records[r])});
  }
  return table;
}

std::string csv_escape(std::string_view field) {
  if (field.find_first_of(",\"\n\r") == std::string_view::npos) return std::string(field);
  std::string out = "\"";
  for (char c : field) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
  return out;
}

}  // namespace gm::util
