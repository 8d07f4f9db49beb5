#include "util/table.h"

#include <algorithm>

namespace gm::util {
namespace {
// Display width of UTF-8 text: counts code points (good enough for the symbols gpumeter prints).
std::size_t display_width(const std::string& s) {
  std::size_t n = 0;
  for (char c : s)
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++n;
  return n;
}
}  // namespace

void TextTable::header(std::vector<std::string> titles, std::vector<Align> align) {
  titles_ = std::move(titles);
  align_ = std::move(align);
  align_.resize(titles_.size(), Align::left);
}

void TextTable::row(std::vector<std::string> cells) {
  rows_.push_back(std::move(cells));
}

std::string TextTable::render() const {
  std::size_t ncol = titles_.size();
  for (const auto& r : rows_) ncol = std::max(ncol, r.size());
  std::vector<std::size_t> width(ncol, 0);
  for (std::size_t c = 0; c < titles_.size(); ++c) width[c] = display_width(titles_[c]);
  for (const auto& r : rows_)
    for (std::size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], display_width(r[c]));
  auto emit = [&](const std::vector<std::string>& cells, std::string& out) {
    std::string line;
    for (std::size_t c = 0; c < ncol; ++c) {
      const std::string cell = c < cells.size() ? cells[c] : "";
      const std::size_t pad = width[c] - display_width(cell);
      const bool right = c < align_.size() && align_[c] == Align::right;
      if (c > 0) line += "  ";
      if (right)
        line += std::string(pad, ' ') + cell;
      else
        line += cell + (c + 1 < ncol ? std::string(pad, ' ') : "");
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  };
  std::string out;
  if (!titles_.empty()) {
    emit(titles_, out);
    std::size_t total = 0;
    for (std::size_t c = 0; c < ncol; ++c) total += width[c] + (c ? 2 : 0);
    std::string rule;
    for (std::size_t i = 0; i < total; ++i) rule += "─";
    out += rule + "\n";
  }
  for (const auto& r : rows_) emit(r, out);
  return out;
}

std::string shorten_middle(const std::string& s, std::size_t width) {
  if (display_width(s) <= width || width < 5) return s;
  // byte-based cut is fine for kernel names (ASCII); keep 2/3 head, 1/3 tail
  const std::size_t head = (width - 1) * 2 / 3;
  const std::size_t tail = width - 1 - head;
  return s.substr(0, head) + "…" + s.substr(s.size() - tail);
}

}  // namespace gm::util
