// libFuzzer target: the Kineto reader and analyses must never crash, hang or break their invariants on
// any input, with and without --partial; the windowed reader (tiny windows, one and two threads) must
// agree with the whole-file reader.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "fuzz_util.h"
#include "trace/trace.h"

namespace {

void check_invariants(const gm::trace::FileAnalysis& f) {
  for (const auto& d : f.devices) {
    std::int64_t k = 0, o = 0;
    for (const auto& b : d.kernels) k += b.attributed_ns;
    for (const auto& b : d.operators) o += b.attributed_ns;
    gm::fuzz::check(d.compute_ns + d.communication_ns + d.memory_ns + d.idle_ns == d.window_ns);
    gm::fuzz::check(k == d.busy_ns && o == d.busy_ns);
  }
}

/// The figures both readers must give alike.
bool same(const gm::trace::FileAnalysis& a, const gm::trace::FileAnalysis& b) {
  if (a.event_count != b.event_count || a.skipped_events != b.skipped_events || a.rank != b.rank ||
      a.skipped != b.skipped || a.partial != b.partial || a.devices.size() != b.devices.size() ||
      a.collectives.size() != b.collectives.size())
    return false;
  for (std::size_t i = 0; i < a.devices.size(); ++i) {
    const auto &x = a.devices[i], &y = b.devices[i];
    if (x.device != y.device || x.gpu_name != y.gpu_name || x.window_ns != y.window_ns ||
        x.busy_ns != y.busy_ns || x.idle_ns != y.idle_ns || x.kernels.size() != y.kernels.size() ||
        x.steps.size() != y.steps.size())
      return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  // The window size comes from the input's length, so that boundaries fall everywhere.
  const std::size_t window = 1 + size % 97;
  gm::fuzz::MemFile file(text);
  for (bool partial : {false, true}) {
    gm::trace::Options options;
    options.partial = partial;
    auto whole = gm::trace::analyze_buffer("fuzz.json", text, options);
    if (whole) check_invariants(*whole);
    options.window_bytes = window;
    for (unsigned threads : {1u, 2u}) {
      options.threads = threads;
      auto windowed = gm::trace::analyze_file(file.path(), options);
      gm::fuzz::check(windowed.ok() == whole.ok());
      if (!windowed) continue;
      check_invariants(*windowed);
      gm::fuzz::check(same(*windowed, *whole));
    }
  }
  return 0;
}
