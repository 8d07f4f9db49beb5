#pragma once
// Test helper: writes Perfetto TracePacket streams (.pftrace) from Kineto JSON traces, with its own
// protobuf encoder, following the mapping gpumeter reads (docs/trace.md "Perfetto traces").
#include <string>

namespace gm::test {

/// The same JSON text with the numbers after every "ts": and "dur": quoted, so that a JSON library
/// keeps their exact text (a double cannot hold epoch-scale microseconds with nanosecond digits).
std::string json_with_quoted_times(const std::string& json);

/// A .pftrace holding the complete (ph "X") events of a Kineto JSON trace: a process track per pid,
/// thread tracks per tid (extra lanes where slices of one thread overlap without nesting), interned
/// names and categories, SLICE_BEGIN / SLICE_END pairs at the exact nanosecond, scalar args as debug
/// annotations.
std::string kineto_json_to_pftrace(const std::string& json);

}  // namespace gm::test
