#pragma once
// Text shared by the trace renderers (trace_render.cpp, trace_job_render.cpp, trace_diff_render.cpp and the
// trace pages).
#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <vector>

#include "trace/trace.h"

namespace gm::report::detail {

/// Nanoseconds as milliseconds with three decimals ("12.345").
inline std::string ms_text(std::int64_t ns) {
  return fmt::format("{:.3f}", static_cast<double>(ns) / 1e6);
}

/// Display names of a diff table's rows (trace::short_names: rows that would print alike stay apart).
inline std::vector<std::string> diff_row_names(const std::vector<trace::DiffRow>& rows, std::size_t width) {
  std::vector<std::string> full_names;
  full_names.reserve(rows.size());
  for (const auto& r : rows) full_names.push_back(r.name);
  return trace::short_names(full_names, width);
}

/// A compared row's change: "new", "vanished", "+12.3%", or "-" when the base is 0.
inline std::string change_text(const trace::DiffRow& r) {
  if (r.status == "new" || r.status == "vanished") return r.status;
  if (!r.change) return "-";
  return fmt::format("{:+.1f}%", 100 * *r.change);
}

}  // namespace gm::report::detail
