#pragma once
// Text shared by the trace renderers (trace_render.cpp and trace_job_render.cpp).
#include <fmt/format.h>

#include <cstdint>
#include <string>

namespace gm::report::detail {

/// Nanoseconds as milliseconds with three decimals ("12.345").
inline std::string ms_text(std::int64_t ns) {
  return fmt::format("{:.3f}", static_cast<double>(ns) / 1e6);
}

}  // namespace gm::report::detail
