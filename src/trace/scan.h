#pragma once
// Internal to src/trace: finding the boundaries between the events of a JSON array without parsing them
// (docs/trace.md "Memory"), 64 bytes at a time with bit masks: quotes not escaped by a backslash run, the
// string mask as their prefix XOR, and brackets and commas outside strings.
#include <cstddef>
#include <cstdint>

namespace gm::trace::detail {

/// Where a scan of a JSON array's elements stands between two bytes.
struct ElementScanState {
  bool in_string = false;  ///< inside a string
  bool escape = false;     ///< the previous byte was a backslash that escapes the next one
  std::int64_t depth = 0;  ///< brackets open since the array's own '['
};

/// What a scan found; offsets are relative to the scanned bytes.
struct ElementScan {
  static constexpr std::size_t npos = SIZE_MAX;
  std::size_t last_comma = npos;  ///< the last comma between two elements of the array
  std::size_t array_end = npos;   ///< the array's closing ']' (the scan stops there)
};

/// The instructions the block scanner uses to find the bytes it looks for.
enum class ScanIsa { best, avx512, avx2, none };

/// True when this CPU runs `isa` (best and none always).
bool scan_isa_supported(ScanIsa isa);

/// Scans `n` bytes from `state` (updated), reporting the last element separator and the array's end. Exact
/// for valid JSON; for invalid JSON the cuts are merely wrong, and the parse of the pieces says so.
ElementScan scan_elements(const char* data, std::size_t n, ElementScanState& state,
                          ScanIsa isa = ScanIsa::best);

/// The same, one byte at a time: the reference the block scanner is tested against.
ElementScan scan_elements_bytewise(const char* data, std::size_t n, ElementScanState& state);

/// JSON's insignificant whitespace (RFC 8259: space, tab, line feed, carriage return).
inline bool is_json_ws(char c) {
  return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

}  // namespace gm::trace::detail
