// libFuzzer target: the Kineto reader and analyses must never crash, hang or break their invariants on
// any input, with and without --partial.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "trace/trace.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (bool partial : {false, true}) {
    gm::trace::Options options;
    options.partial = partial;
    auto r = gm::trace::analyze_buffer("fuzz.json", text, options);
    if (!r) continue;
    for (const auto& d : r->devices) {
      std::int64_t k = 0, o = 0;
      for (const auto& b : d.kernels) k += b.attributed_ns;
      for (const auto& b : d.operators) o += b.attributed_ns;
      if (d.compute_ns + d.communication_ns + d.memory_ns + d.idle_ns != d.window_ns) std::abort();
      // Kernels launched before the profiler's window have no operator: they stand in before_window.
      if (k != d.busy_ns || o + d.before_window.attributed_ns != d.busy_ns) std::abort();
    }
  }
  return 0;
}
