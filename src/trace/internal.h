#pragma once
// Internal to src/trace: the compact event tables the reader fills and the analyses consume.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "trace/trace.h"

namespace gm::trace::detail {

enum class Klass : std::uint8_t { compute = 0, communication = 1, memory = 2 };

/// A GPU activity (kernel, memcpy, memset, MTIA ccp event).
struct Activity {
  std::int64_t start_ns;
  std::int64_t dur_ns;
  std::int64_t correlation;  // -1 when absent
  std::uint32_t name;        // interned
  std::uint32_t device;      // interned pid text
  std::uint32_t stream;      // interned tid text of the GPU event (the CUDA stream); "" when absent
  Klass klass;
};
static_assert(sizeof(Activity) <= 40, "docs/trace.md Memory: 40 B per kernel / memcpy");

/// A runtime / driver launch call.
struct Launch {
  std::int64_t correlation;
  std::int64_t ts_ns;
  std::uint32_t thread;  // interned "pid/tid"
  bool graph = false;    // cudaGraphLaunch / cuGraphLaunch / hipGraphLaunch: one call starts many activities
};
static_assert(sizeof(Launch) <= 24, "docs/trace.md Memory: 24 B per launch call");

enum class SpanKind : std::uint8_t { op, annotation, gpu_annotation, step };

/// The element type of an operator's first input (its `Input type` with record_shapes); matrix operators
/// only.
enum class OpDtype : std::uint8_t { unknown, fp32, reduced, other };

/// A CPU span (cpu_op, user_annotation, ProfilerStep) or a gpu_user_annotation (thread = device).
struct Span {
  std::int64_t start_ns;
  std::int64_t end_ns;
  std::uint32_t thread;
  std::uint32_t name;
  SpanKind kind;
  OpDtype dtype = OpDtype::unknown;  // GEMM / convolution operators recorded with shapes
};
static_assert(sizeof(Span) <= 32, "docs/trace.md Memory: 32 B per CPU span");

/// Interns strings (raw JSON text, still escaped) to dense ids.
class Interner {
 public:
  std::uint32_t id(std::string_view s) {
    auto it = map_.find(s);
    if (it != map_.end()) return it->second;
    auto owned = std::make_unique<std::string>(s);
    std::string_view key(*owned);
    auto next = static_cast<std::uint32_t>(strings_.size());
    strings_.push_back(std::move(owned));
    map_.emplace(key, next);
    return next;
  }
  const std::string& str(std::uint32_t id) const { return *strings_[id]; }
  std::size_t size() const { return strings_.size(); }

 private:
  std::vector<std::unique_ptr<std::string>> strings_;
  std::unordered_map<std::string_view, std::uint32_t> map_;
};

/// The container format of a file, from its content.
enum class Format : std::uint8_t {
  unknown,   ///< not a trace (RawTrace::not_a_trace / Sniff::what say what it is)
  json,      ///< JSON: a Kineto object with traceEvents, or a legacy bare array of events
  perfetto,  ///< Perfetto protobuf TracePacket stream (.pftrace / .pb)
};

/// What the first bytes of a file say it is.
struct Sniff {
  Format format = Format::unknown;
  std::string what;  ///< for unknown: "a PNG image", "an empty file", ...
};

/// Looks at the (inflated) first bytes of a file; `complete` when `head` is the whole content.
Sniff sniff(std::string_view head, bool complete);

/// The collective metadata of one GPU kernel (Kineto args of NCCL kernels; docs/trace.md "The job").
struct RawCollective {
  std::size_t activity;          // index into RawTrace::activities
  std::uint32_t group;           // interned "Process Group Name"
  std::uint32_t name;            // interned "Collective name"
  std::int64_t nelems = -1;      // "In msg nelems"; -1 when absent
  std::int64_t seq = -1;         // "Seq"; -1 when absent
  std::int64_t group_size = -1;  // "Group size"; -1 when absent
};

/// Everything the analyses need from one file.
struct RawTrace {
  Interner names;    // escaped JSON string contents (kernel, op, annotation names)
  Interner devices;  // pid text of GPU events
  Interner threads;  // "pid/tid" text of CPU events
  Interner streams;  // tid text of GPU events (CUDA streams)
  std::vector<Activity> activities;
  std::vector<Launch> launches;
  std::vector<Span> spans;
  std::unordered_map<std::string, std::string> device_names;  // deviceProperties id text -> name
  std::unordered_map<std::string, int> device_compute_major;  // deviceProperties id text -> computeMajor
  std::optional<std::int64_t> rank;
  bool has_trace_events = false;  // the file is a trace (Kineto traceEvents, a legacy event array, Perfetto)
  std::string format;             // "kineto_json", "chrome_json_array" or "perfetto_protobuf"
  std::string not_a_trace;        // when !has_trace_events and the content was understood: what it is
  std::int64_t event_count = 0;
  std::int64_t skipped_events = 0;
  std::vector<RawCollective> collectives;                    // NCCL kernels with process-group metadata
  std::vector<std::pair<std::int64_t, std::int64_t>> syncs;  // host calls that block on the GPU [start, end)
  bool spans_sorted = false;                                 // spans are in span_order (sort_spans ran)
};

/// The order of RawTrace::spans after sort_spans: by kind, thread, start, end (outer first), name.
bool span_order(const Span& a, const Span& b);

/// Sorts the spans once for every analysis that reads them by thread and time.
void sort_spans(RawTrace& raw);

/// The spans of one kind in span_order: a view into raw.spans when they are sorted, else a sorted copy
/// kept in `storage`.
std::span<const Span> spans_of_kind(const RawTrace& raw, SpanKind kind, std::vector<Span>& storage);

/// For each query (thread, ts), the innermost of `spans` (one kind, in span_order) on that thread with
/// start <= ts < end (start <= ts <= end for zero-length spans); nullptr when none.
std::vector<const Span*> innermost(std::span<const Span> spans,
                                   const std::vector<std::pair<std::uint32_t, std::int64_t>>& queries);

/// Parses JSON text (padded with at least 64 readable bytes after `len`) into `out`. On a parse error
/// returns an Error naming `name` and the byte offset; `out` keeps what was read before it.
Result<void> parse_trace(const std::string& name, const char* data, std::size_t len, RawTrace& out,
                         const Options& options);

/// A simdjson parser kept across parse_trace calls of one thread, so that its buffers are reused.
class JsonParser {
 public:
  JsonParser();
  ~JsonParser();
  JsonParser(const JsonParser&) = delete;
  JsonParser& operator=(const JsonParser&) = delete;
  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

/// parse_trace with a reused parser.
Result<void> parse_trace(const std::string& name, const char* data, std::size_t len, RawTrace& out,
                         const Options& options, JsonParser& parser);

/// Reads the JSON trace file at `path` a window of `window_bytes` at a time (gzip inflated as it goes),
/// parsing complete events into `out` (on `threads` workers when more than one, merged in file order: the
/// same tables as one thread); `json_bytes` gets the inflated size. False (with `out` to be
/// discarded) when the file needs the whole-file reader: not JSON, damaged, or not a Kineto object or event
/// array; that reader then gives the error or the --partial repair.
Result<bool> parse_json_windowed(const std::string& path, RawTrace& out, const Options& options,
                                 std::size_t window_bytes, unsigned threads, std::int64_t& json_bytes);

/// parse_trace; with options.partial, a document that fails before any event (a truncated file) is cut
/// after its last complete-looking event and parsed again (`data` is modified). The original error is
/// returned either way; `out` holds what could be read.
Result<void> parse_trace_repairing(const std::string& name, char* data, std::size_t len, RawTrace& out,
                                   const Options& options);

/// The trace event categories the analyses tell apart.
enum class Cat : std::uint8_t { other, kernel, memory, runtime, cpu_op, annotation, gpu_annotation };

/// Maps a Kineto category (2021 and current names) to Cat.
Cat classify_cat(std::string_view cat);

/// One complete event, decoded by a reader (JSON or Perfetto).
/// What an event's `args` say: the launch correlation, NCCL collective metadata, an operator's input type.
struct EventArgs {
  std::int64_t correlation = -1;
  bool collective = false;           ///< carries NCCL collective metadata
  std::string_view group;            ///< "Process Group Name" (JSON-escaped), empty when absent
  std::string_view collective_name;  ///< "Collective name" (JSON-escaped)
  std::optional<std::int64_t> nelems, seq, group_size;  ///< "In msg nelems", "Seq", "Group size"
  std::string_view input_type;  ///< GEMM / convolution operators: the first `Input type` (JSON-escaped)
};

struct DecodedEvent : EventArgs {
  Cat cat = Cat::other;
  std::string_view name;    ///< JSON-escaped string contents (unescape_json gives the display name)
  std::string_view device;  ///< kernels, memcpy/memset, gpu annotations: the device (Kineto pid text)
  std::string_view thread;  ///< CPU events: any text naming the thread uniquely within the file
  std::string_view stream;  ///< kernels, memcpy/memset: the stream (Kineto tid text), empty when absent
  std::optional<std::int64_t> ts, dur;  ///< ns
};

/// A GEMM or convolution operator (`aten::mm`, `addmm`, `bmm`, `cudnn_convolution`, `convolution_backward`,
/// ...), whose `Input type` says what its kernels compute with.
bool is_matrix_operator(std::string_view op_name);

/// An `Input type` entry that is a tensor's element type ("float", "c10::BFloat16"), not another argument's
/// kind ("GenericList", "Scalar", "Int", "").
bool is_tensor_dtype(std::string_view input_type);

/// OpDtype of an `Input type` entry ("float", "c10::BFloat16", "c10::Half", ...).
OpDtype op_dtype(std::string_view input_type);

/// What one GPU kernel computes with: from its launching operator's dtype when that operator is a GEMM /
/// convolution recorded with shapes (`op_dtype` unknown otherwise), else from the kernel-family table.
KernelMath activity_math(std::string_view kernel_name, OpDtype op_dtype);

/// Adds one decoded event to the tables (GPU events without usable ts/dur are counted as skipped).
void add_event(RawTrace& out, const DecodedEvent& ev);

/// Escapes text for use as DecodedEvent::name (the inverse of unescape_json).
std::string escape_json(std::string_view text);

/// Order statistics of a sample.
Stats make_stats(std::vector<std::int64_t> v);

/// Parses a Perfetto protobuf TracePacket stream into `out` (same tables as the JSON reader). On damage
/// returns an Error naming `name` and the byte offset; `out` keeps what was read before it.
Result<void> parse_perfetto(const std::string& name, const char* data, std::size_t len, RawTrace& out,
                            const Options& options);

/// Runs the DESIGN §3 analyses over a parsed trace.
std::vector<DeviceAnalysis> analyze(const RawTrace& raw);

/// The outermost CPU operators (any thread) overlapping the given idle gaps [start, end), by overlap.
std::vector<IdleCpuOp> cpu_ops_during(const RawTrace& raw,
                                      const std::vector<std::pair<std::int64_t, std::int64_t>>& gaps);

/// An idle gap of a device whose next activity was launched after the gap began, by `thread`.
struct HostWaitGap {
  std::int64_t start_ns;
  std::int64_t end_ns;
  std::uint32_t thread;  // the launching thread of the next activity
};

/// Splits host-wait gaps (none beginning in a sync call) by what the host was doing (docs/trace.md "Idle
/// gaps"): fills idle_dispatch_ns, idle_dispatch_in_ops_ns, idle_input_ns, idle_input_dataloader_ns,
/// dispatch_cpu_ops and input_frames of `d`.
void classify_host_wait(const RawTrace& raw, const std::vector<HostWaitGap>& gaps, DeviceAnalysis& d);

/// Finds matmul → softmax → matmul chains (docs/findings.md `unfused_attention`) and fills the `attention`
/// figures of the host analysis (CPU time) and of each device (the GPU activities the chains launched).
void add_attention(const RawTrace& raw, std::vector<DeviceAnalysis>& devices,
                   std::optional<HostAnalysis>& host);

/// Host-side (CPU) figures: window, steps, operators by self time. nullopt without CPU spans.
std::optional<HostAnalysis> analyze_host(const RawTrace& raw);

/// The collective kernels of a parsed trace with their metadata and the step of their launch, by start;
/// `without_metadata` counts the nccl* kernels whose args name no process group.
std::vector<CollectiveCall> collective_calls(const RawTrace& raw, std::int64_t& without_metadata);

/// Unescapes the contents of a JSON string (without quotes).
std::string unescape_json(std::string_view raw);

}  // namespace gm::trace::detail
