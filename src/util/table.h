#pragma once
// Plain-text tables for terminal reports: aligned columns, right-aligned numbers.
#include <string>
#include <vector>

namespace gm::util {

/// A text table; add a header, rows, then render.
class TextTable {
 public:
  enum class Align { left, right };
  /// Sets the column titles and their alignment.
  void header(std::vector<std::string> titles, std::vector<Align> align = {});
  /// Appends a row (missing cells render empty).
  void row(std::vector<std::string> cells);
  /// Renders with two spaces between columns and a rule under the header.
  std::string render() const;

 private:
  std::vector<std::string> titles_;
  std::vector<Align> align_;
  std::vector<std::vector<std::string>> rows_;
};

/// Shortens `s` to at most `width` display characters, keeping head and tail with "…" between.
std::string shorten_middle(const std::string& s, std::size_t width);

}  // namespace gm::util
