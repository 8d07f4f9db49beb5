// libFuzzer target: the windowed JSON reader against the whole-file reader. For any input written to a
// file, analyze_file (windowed, with a window of 1 to 256 bytes taken from the input, on one and two
// threads) either succeeds with exactly the analysis the whole-file reader gives, or fails exactly when it
// fails.
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "trace/scan.h"
#include "trace/trace.h"

namespace {

std::string summary(const gm::trace::FileAnalysis& f) {
  std::string s = f.format + "|" + std::to_string(f.event_count) + "|" + std::to_string(f.bytes) + "|" +
                  std::to_string(f.rank.value_or(-1)) + "|" + f.skipped.value_or("") + "|";
  for (const auto& d : f.devices) {
    s += d.device + ":" + d.gpu_name.value_or("") + ":" + std::to_string(d.window_ns) + ":" +
         std::to_string(d.busy_ns) + ":" + std::to_string(d.activity_count) + ":" +
         std::to_string(d.kernels.size()) + ";";
  }
  s += "|" + std::to_string(f.collectives.size());
  if (f.host) s += "|" + std::to_string(f.host->span_count);
  return s;
}

}  // namespace

/// The block scanner against the byte-at-a-time reference, the text fed in pieces of `piece` bytes.
void check_scanner(std::string_view text, std::size_t piece) {
  using gm::trace::detail::ElementScan;
  gm::trace::detail::ElementScanState block, bytewise;
  for (std::size_t pos = 0; pos < text.size(); pos += piece) {
    const std::size_t n = std::min(piece, text.size() - pos);
    const ElementScan a = gm::trace::detail::scan_elements(text.data() + pos, n, block);
    const ElementScan b = gm::trace::detail::scan_elements_bytewise(text.data() + pos, n, bytewise);
    if (a.last_comma != b.last_comma || a.array_end != b.array_end) std::abort();
    if (a.array_end != ElementScan::npos) return;
    if (block.in_string != bytewise.in_string || block.escape != bytewise.escape ||
        block.depth != bytewise.depth)
      std::abort();
  }
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  static const std::string path = "/tmp/gpumeter-fuzz-window-" + std::to_string(::getpid()) + ".json";
  const std::size_t window = 1 + data[0];
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  check_scanner(text, window);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return 0;
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !written) return 0;
  auto whole = gm::trace::analyze_buffer(path, text);
  // One thread, and two (batches cut by the element scanner and parsed on workers).
  for (unsigned threads : {1u, 2u}) {
    gm::trace::Options options;
    options.window_bytes = window;
    options.threads = threads;
    auto windowed = gm::trace::analyze_file(path, options);
    if (windowed.ok() != whole.ok()) std::abort();
    if (windowed.ok() && summary(*windowed) != summary(*whole)) std::abort();
  }
  return 0;
}
