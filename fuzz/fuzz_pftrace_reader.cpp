// libFuzzer target: the Perfetto protobuf reader and the analyses over what it read must never crash,
// hang or break their invariants on any input.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "trace/internal.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  gm::trace::detail::RawTrace raw;
  const std::string name = "fuzz.pftrace";
  (void)gm::trace::detail::parse_perfetto(name, reinterpret_cast<const char*>(data), size, raw,
                                          gm::trace::Options{});
  for (const auto& d : gm::trace::detail::analyze(raw)) {
    std::int64_t k = 0, o = 0, s = 0;
    for (const auto& b : d.kernels) k += b.attributed_ns;
    for (const auto& b : d.operators) o += b.attributed_ns;
    for (const auto& b : d.steps) s += b.attributed_ns;
    if (d.compute_ns + d.communication_ns + d.memory_ns + d.idle_ns != d.window_ns) std::abort();
    // Kernels launched before the profiler's window have no operator or step: they stand in before_window.
    const std::int64_t before = d.before_window.attributed_ns;
    if (k != d.busy_ns || o + before != d.busy_ns || s + before != d.busy_ns) std::abort();
  }
  (void)gm::trace::detail::analyze_host(raw);
  return 0;
}
