#pragma once
// Kineto (PyTorch profiler) trace analysis: a streaming reader and the DESIGN §3 "Trace costs"
// breakdowns. All durations are integer nanoseconds parsed from the decimal text of the file.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/result.h"

namespace gm::trace {

/// One row of a breakdown (a kernel name, an operator, an annotation or a profiler step).
struct Bucket {
  std::string name;                 ///< full name (kernels: the demangled kernel name)
  std::string klass;                ///< kernels only: "compute", "communication" or "memory"
  std::int64_t count = 0;           ///< activities in this bucket (steps: 1)
  std::int64_t kernel_ns = 0;       ///< Σ raw durations of its activities
  std::int64_t attributed_ns = 0;   ///< fair share of busy time; Σ over a breakdown == busy_ns
  std::int64_t step_ns = 0;         ///< steps only: wall duration of the ProfilerStep span
};

/// Order statistics of a sample (all zero when count == 0).
struct Stats {
  std::int64_t count = 0;
  double mean = 0;
  std::int64_t min = 0, p50 = 0, p95 = 0, max = 0;
  double stdev = 0;
};

/// A CPU operator that ran while a device was idle: what the host was doing instead of feeding the GPU.
struct IdleCpuOp {
  std::string name;
  std::int64_t count = 0;       ///< (operator call, idle gap) pairs that overlap
  std::int64_t overlap_ns = 0;  ///< Σ overlap with the idle gaps (calls on different threads each count)
};

/// Activities that ran in the window but were launched before the profiler began recording (the CPU ran
/// ahead of the GPU): no launch call in the trace, a correlation id older than every recorded launch.
struct BeforeWindow {
  std::int64_t count = 0;          ///< activities
  std::int64_t kernel_ns = 0;      ///< Σ raw durations
  std::int64_t attributed_ns = 0;  ///< fair share of busy time (not in the operator, annotation, step rows)
  std::int64_t end_ns = 0;         ///< the last one's end (trace clock)
  std::vector<Bucket> kernels;     ///< by kernel name, largest attributed first
};

/// GEMM and convolution time of a device by what it computes with (docs/findings.md `fp32_math`).
struct MatrixMath {
  std::int64_t fp32_ns = 0;         ///< fair share of the fp32 GEMM / convolution kernels (CUDA cores)
  std::int64_t fp32_kernel_ns = 0;  ///< Σ their raw durations
  std::int64_t fp32_count = 0;
  std::int64_t fp32_before_window_ns = 0;  ///< of fp32_ns: kernels launched before the window
  std::int64_t tensor_core_ns = 0;         ///< fair share of tensor-core GEMM / convolution kernels (TF32 included)
  std::int64_t from_dtypes_count = 0;      ///< kernels told by their operator's `Input type` (record_shapes)
  std::int64_t from_names_count = 0;       ///< GEMM / convolution kernels told by the kernel-family table
  std::string largest_fp32_kernel;         ///< the fp32 kernel with the most time (full name)
};

/// The GPU span of the work launched inside the profiler's steps (ProfilerStep#N): the first such activity's
/// start to the last one's end, and what the device did in it (same class precedence as the window).
struct StepsSpan {
  std::int64_t start_ns = 0;
  std::int64_t span_ns = 0;
  std::int64_t busy_ns = 0;
  std::int64_t compute_ns = 0;
  std::int64_t communication_ns = 0;
  std::int64_t memory_ns = 0;
};

/// What one device did during the wall time of one profiler step (same class precedence as the window:
/// compute, then communication, then memory).
struct StepSplit {
  std::string name;             ///< ProfilerStep#N
  std::int64_t start_ns = 0;    ///< span start (trace clock)
  std::int64_t step_ns = 0;     ///< wall duration of the ProfilerStep span
  std::int64_t compute_ns = 0;  ///< |∪ compute ∩ step|
  std::int64_t communication_ns = 0;
  std::int64_t memory_ns = 0;
  std::int64_t idle_ns = 0;  ///< step_ns − busy inside the step
};

/// One GPU activity of the timeline step.
struct TimelineSpan {
  std::uint32_t stream = 0;   ///< index into StepTimeline::streams
  std::uint32_t name = 0;     ///< index into StepTimeline::names
  std::int64_t start_ns = 0;  ///< from the step's start
  std::int64_t dur_ns = 0;
  std::string_view klass;  ///< "compute", "communication" or "memory" (static text)
};

/// The activities of one typical step (the median step by wall time, the first step left out as warm-up
/// when there are three or more), for a stream timeline. Names are kept once each.
struct StepTimeline {
  std::string step;           ///< ProfilerStep#N
  std::int64_t start_ns = 0;  ///< step start (trace clock)
  std::int64_t step_ns = 0;
  std::vector<std::string> streams;  ///< the CUDA streams (Kineto tid of GPU events); "" when absent
  std::vector<std::string> names;    ///< kernel / memcpy names
  std::vector<TimelineSpan> spans;   ///< by start; at most kTimelineMaxSpans
  std::int64_t spans_left_out = 0;   ///< activities of the step beyond kTimelineMaxSpans
};

/// The most activities a StepTimeline keeps.
inline constexpr std::size_t kTimelineMaxSpans = 4000;

/// Attention written as separate operators: batched matmul → softmax → batched matmul on one thread, under
/// the same parent operator and annotation, in a step that ran no fused attention (docs/findings.md
/// `unfused_attention`).
struct AttentionFigures {
  std::int64_t chains = 0;                 ///< chains in steps without fused attention
  std::int64_t chains_in_fused_steps = 0;  ///< chains left out because their step also ran fused attention
  std::int64_t fused = 0;                  ///< fused attention seen: SDPA / flash operators, fused kernels
  std::int64_t host_ns = 0;         ///< host only: Σ CPU time of the chains (first matmul start to last end)
  std::int64_t host_matmul_ns = 0;  ///< host only: of which inside the two matmul operators
  std::int64_t kernel_ns = 0;       ///< devices: Σ durations of the GPU activities the chains launched
  std::int64_t matmul_kernel_ns = 0;  ///< devices: of which launched by the two matmul operators
  std::string pattern;  ///< the first chain's operators ("aten::matmul → aten::softmax → …")
};

/// The analysis of one device (Kineto `pid` of GPU events) of one file.
struct DeviceAnalysis {
  std::string device;                     ///< the pid text of its GPU events ("0", "1", ...)
  std::optional<std::string> gpu_name;    ///< from deviceProperties when present
  std::optional<int> compute_major;       ///< CUDA compute capability major (deviceProperties computeMajor)
  std::int64_t window_start_ns = 0;       ///< first activity start (trace clock)
  std::int64_t window_ns = 0;             ///< first start to last end
  std::int64_t busy_ns = 0;               ///< |∪ activities|
  std::int64_t idle_ns = 0;               ///< window − busy
  std::int64_t compute_ns = 0;            ///< |∪ compute|
  std::int64_t communication_ns = 0;      ///< |∪ comm \ ∪ compute|
  std::int64_t memory_ns = 0;             ///< |∪ memory \ (∪ compute ∪ ∪ comm)|
  std::int64_t overlap_ns = 0;            ///< |∪ comm ∩ ∪ compute|
  std::int64_t kernel_ns = 0;             ///< Σ raw durations of all GPU activities
  std::int64_t activity_count = 0;        ///< GPU activities (zero-length included)
  std::int64_t zero_length_count = 0;     ///< activities with dur 0 (window and counts only)
  std::int64_t idle_host_wait_ns = 0;     ///< idle gaps whose next activity was launched after the gap began
  std::int64_t idle_other_ns = 0;         ///< idle_ns − idle_host_wait_ns
  std::int64_t idle_after_sync_ns = 0;    ///< idle gaps that began while the host was blocked in a sync call
  std::int64_t sync_gap_count = 0;        ///< how many such gaps
  std::int64_t idle_gap_count = 0;        ///< gaps between busy intervals inside the window
  /// Host wait by what the host was doing (docs/trace.md "Idle gaps"): dispatching operators (inside one on
  /// the thread that launched the next work, or between the operators of a step) ...
  std::int64_t idle_dispatch_ns = 0;
  std::int64_t idle_dispatch_in_ops_ns = 0;  ///< ... of which inside an operator
  /// ... waiting for input (inside a DataLoader iteration, or outside any operator before a step's first or
  /// after its last operator, between steps included) ...
  std::int64_t idle_input_ns = 0;
  std::int64_t idle_input_dataloader_ns = 0;  ///< ... of which inside a DataLoader iteration
  std::int64_t idle_host_sync_ns = 0;         ///< ... or a gap that began in a sync call (sync_stall's)
  std::int64_t idle_in_graph_ns = 0;  ///< of idle_other_ns: between the activities of one CUDA graph launch
  std::int64_t graph_launches = 0;    ///< CUDA graph launch calls whose activities ran on this device
  std::vector<IdleCpuOp> dispatch_cpu_ops;  ///< outermost CPU operators overlapping the dispatch idle
  std::int64_t longest_dispatch_gap_ns = 0;  ///< the dispatch idle of the one gap holding the most of it
  std::string longest_dispatch_gap_op;       ///< the outermost CPU operator most present in that gap
  std::vector<IdleCpuOp> input_frames;      ///< DataLoader iterations overlapping the input idle (by name)
  BeforeWindow before_window;               ///< activities launched before the profiler's window
  MatrixMath matrix_math;                   ///< GEMM / convolution time by precision
  std::optional<StepsSpan> steps_span;      ///< nullopt without activities launched inside ProfilerSteps
  bool fair_share_exact = true;           ///< shares within 1 ns of exact (false: within k ns, k activities at once)
  std::vector<IdleCpuOp> idle_cpu_ops;    ///< outermost CPU operators overlapping the idle gaps, largest first
  Stats launch_delay_ns;                  ///< activity start − start of its launching runtime call
  Stats queue_depth;                      ///< activities launched and not finished, at each launch
  Stats step_ns;                          ///< ProfilerStep wall durations
  std::vector<Bucket> kernels;            ///< by name, largest attributed first
  std::vector<Bucket> operators;          ///< innermost enclosing cpu_op of the launch; "(no operator)" (never
                                          ///< activities launched before the window: see before_window)
  std::vector<Bucket> annotations;        ///< innermost user / gpu_user annotation; "(no annotation)"
  std::vector<Bucket> steps;              ///< ProfilerStep#N in step order; "(outside steps)" last
  std::vector<StepSplit> step_split;      ///< per ProfilerStep span, by start
  std::optional<StepTimeline> timeline;   ///< nullopt without ProfilerStep spans
  AttentionFigures attention;             ///< unfused attention chains and the kernels they launched here
};

/// One operator name on the host: inclusive and self (minus nested operators) CPU time.
struct OperatorTime {
  std::string name;
  std::int64_t count = 0;
  std::int64_t total_ns = 0;  ///< Σ durations (nested calls of the same name count each time)
  std::int64_t self_ns = 0;   ///< Σ (duration − time in directly nested operators)
};

/// Host-side (CPU) figures of one file; the only figures of a CPU-only trace.
struct HostAnalysis {
  std::int64_t window_start_ns = 0;     ///< first CPU event start (trace clock)
  std::int64_t window_ns = 0;           ///< first CPU event start to last CPU event end
  std::int64_t span_count = 0;          ///< CPU operator / annotation / step spans read
  Stats step_ns;                        ///< ProfilerStep wall durations
  std::vector<Bucket> steps;            ///< ProfilerStep#N in step order (name, step_ns)
  std::vector<OperatorTime> operators;  ///< by self time, largest first
  AttentionFigures attention;           ///< unfused attention chains (CPU time)
};

/// One collective kernel of a file, with the NCCL metadata Kineto records in its args (the job view).
struct CollectiveCall {
  std::string group;                       ///< "Process Group Name"
  std::string name;                        ///< "Collective name" (allreduce, broadcast, ...)
  std::optional<std::int64_t> nelems;      ///< "In msg nelems"
  std::optional<std::int64_t> seq;         ///< "Seq", when the profiler recorded it
  std::optional<std::int64_t> group_size;  ///< "Group size"
  std::string device;                      ///< the pid text of its GPU
  std::int64_t start_ns = 0;               ///< kernel start (trace clock)
  std::int64_t dur_ns = 0;
  std::optional<std::string> step;  ///< the ProfilerStep#N holding its launch (its start without a launch)
};

/// The analysis of one file.
struct FileAnalysis {
  std::string file;
  std::string group;                      ///< the folder holding the file (one run = one folder of ranks)
  std::string format;                     ///< kineto_json, chrome_json_array, perfetto_protobuf; "" if not a trace
  std::optional<std::int64_t> rank;       ///< distributedInfo.rank
  std::optional<std::string> skipped;     ///< why the file is not analysed: what it is ("a PNG image", ...)
  bool partial = false;                   ///< the file is damaged; figures cover what parsed
  std::string partial_error;              ///< the parse error when partial
  std::int64_t bytes = 0;                 ///< uncompressed JSON bytes
  std::int64_t event_count = 0;           ///< entries of traceEvents read
  std::int64_t skipped_events = 0;        ///< GPU events without usable ts/dur (or negative dur)
  std::vector<DeviceAnalysis> devices;    ///< empty: no GPU activity
  std::optional<HostAnalysis> host;       ///< CPU-side figures; nullopt without CPU spans
  std::vector<CollectiveCall> collectives;  ///< NCCL kernels with process-group metadata, by start
  std::int64_t collective_kernels_without_metadata = 0;  ///< nccl* kernels whose args name no process group
};

/// One rank of a job (a file of a folder of rank traces).
struct JobRank {
  std::int64_t rank = 0;
  std::string file;
  std::int64_t gpus = 0;             ///< devices with GPU activity in the file
  std::int64_t busy_ns = 0;          ///< Σ over its devices
  std::int64_t idle_ns = 0;          ///< Σ over its devices of (job window − busy)
  bool collective_metadata = false;  ///< its collective kernels name their process group
  std::int64_t collectives = 0;      ///< matched collective instances it took part in
  std::int64_t arrivals_last =
      0;  ///< instances where it arrived last and others waited (ties: the lowest rank)
  std::int64_t wait_caused_ns = 0;    ///< Σ the other ranks' waits in the instances where it was last
  std::int64_t wait_suffered_ns = 0;  ///< Σ its own waits for the last rank
};

/// Straggler wait of one profiler step, over every rank.
struct JobStep {
  std::string step;          ///< ProfilerStep#N ("(outside steps)" for kernels launched outside)
  std::int64_t wait_ns = 0;  ///< Σ waits of every rank in that step
  std::vector<std::int64_t> wait_by_rank_ns;  ///< in JobAnalysis::ranks order
  std::optional<std::int64_t> last_rank;      ///< the rank most often last in that step (ties: the lowest)
};

/// The job a folder of rank traces makes (docs/trace.md "The job").
struct JobAnalysis {
  std::string group;                 ///< the folder
  std::int64_t window_start_ns = 0;  ///< first GPU activity on any rank
  std::int64_t window_ns = 0;        ///< to the last GPU activity's end on any rank
  std::int64_t gpus = 0;             ///< Σ ranks' GPUs
  std::int64_t gpu_ns = 0;           ///< gpus × window: the GPU time the job held, what it costs
  std::int64_t busy_ns = 0;          ///< Σ ranks' busy time
  std::int64_t instances = 0;        ///< collective instances matched across ranks
  std::int64_t wait_ns = 0;    ///< Σ every rank's straggler wait: GPU time spent waiting for the last rank
  std::vector<JobRank> ranks;  ///< by rank
  std::vector<JobStep> steps;  ///< in step order
  std::vector<std::string> notes;  ///< what could not be matched, and why
};

/// The jobs of the analysed files: each folder holding two or more rank traces with GPU activity.
std::vector<JobAnalysis> analyze_jobs(const std::vector<FileAnalysis>& files);

/// The analyses of files and folders.
struct TraceSet {
  std::vector<FileAnalysis> files;     ///< grouped by folder, path order inside a group
  std::vector<std::string> problems;   ///< reported, not fatal: unreadable entries, symlink loops
  std::vector<std::string> errors;     ///< fatal for the exit code: a named file that is not a trace, an empty folder
};

/// The default read window of JSON traces (Options::window_bytes).
inline constexpr std::size_t kDefaultWindowBytes = 2u << 20;

/// Reader options.
struct Options {
  bool partial = false;  ///< analyse what parsed in a damaged file instead of failing
  /// Called now and then with (bytes done, bytes total) of one file; may be called from worker threads.
  std::function<void(std::int64_t, std::int64_t)> progress;
  /// Worker threads (0: hardware concurrency): files are read in parallel, and when there are fewer files
  /// than threads, the windows of each JSON file are parsed on the spare ones (same results as one thread).
  unsigned threads = 0;
  /// JSON files are read this many (inflated) bytes at a time, so memory does not grow with the file
  /// (0: kDefaultWindowBytes; tests use tiny windows).
  std::size_t window_bytes = 0;
};

/// Reads and analyses one trace file (Kineto JSON, a legacy event array, Perfetto protobuf; gzip'd or
/// not, by content). A file that is not a trace comes back with `skipped` saying what it is. Errors
/// name the file and the byte offset.
Result<FileAnalysis> analyze_file(const std::string& path, const Options& options = {});

/// Analyses files and folders (a folder: every file under it, recursively, recognised by content;
/// files are grouped by the folder holding them), in parallel. Fails on a missing path or a damaged trace
/// (the first by path order); non-trace files and unreadable entries are reported in the TraceSet.
Result<TraceSet> analyze_inputs(const std::vector<std::string>& paths, const Options& options = {});

/// analyze_inputs, files only.
Result<std::vector<FileAnalysis>> analyze_paths(const std::vector<std::string>& paths, const Options& options = {});

/// Analyses JSON text already in memory (`name` is used in messages).
Result<FileAnalysis> analyze_buffer(const std::string& name, std::string_view json, const Options& options = {});

/// Reads a .json or .json.gz file into memory (inflating gzip); for benchmarks and tools.
Result<std::string> read_trace_text(const std::string& path);

/// Parses a JSON number token in microseconds ("123.456789", "17", "1.5e3") into integer nanoseconds,
/// exactly for plain decimals (digits beyond the nanosecond are truncated). nullopt if not a number.
std::optional<std::int64_t> parse_us_to_ns(std::string_view token);

// --- gpumeter trace diff: two runs compared per profiler step, with a cost gate for CI ---

/// One compared item: a class of time (window, busy, compute, ...), a kernel, an operator or an annotation.
struct DiffRow {
  std::string kind;            ///< "summary", "kernel", "operator", "annotation"
  std::string name;            ///< window / busy / compute / communication / memory / idle / step; or the item's name
  std::string klass;           ///< kernels: compute / communication / memory
  double base_ns = 0;          ///< per step (or per trace, see TraceDiff::per) in BASE
  double new_ns = 0;           ///< per step in NEW
  double base_share = 0;       ///< of BASE busy time (breakdown rows); of the window (summary rows)
  double new_share = 0;        ///< of NEW busy time / window
  std::optional<double> change;  ///< (new − base) / base; nullopt when base is 0
  std::string status;          ///< "same", "up", "down", "new", "vanished"
  bool gated = false;          ///< checked by the gate (window; kernels and operators over min_share)
  bool failed = false;         ///< its rise adds more than the threshold to the base busy time per step
};

/// Gate settings.
struct DiffOptions {
  double max_increase = 0.05;  ///< fraction: 0.05 = +5 % (of the cost per step; items: of the base busy time per step)
  double min_share = 0.01;     ///< items under this share of busy time in both runs are not gated
};

/// The comparison of two sets of traces (all devices of all files of each side are summed).
struct TraceDiff {
  std::string per;                  ///< "step" (both sides have ProfilerSteps) or "trace"
  std::int64_t base_steps = 0, new_steps = 0;
  std::int64_t base_devices = 0, new_devices = 0;
  std::vector<DiffRow> summary;     ///< window, busy, compute, communication, memory, idle, step time
  std::vector<DiffRow> kernels, operators, annotations;  ///< largest change in cost first
  std::vector<std::string> failures;  ///< what failed the gate, in words
  bool pass = true;
};

/// Compares NEW with BASE. Fails when a side has no GPU activity.
Result<TraceDiff> diff_traces(const std::vector<FileAnalysis>& base, const std::vector<FileAnalysis>& now,
                              const DiffOptions& options);

/// What a kernel computes with, from its name.
enum class KernelMath {
  other,        ///< not a GEMM or convolution (or its element type cannot be told)
  fp32,         ///< a GEMM / convolution in fp32 on the CUDA cores (sgemm, scudnn, `<float, …>` templates)
  tensor_core,  ///< a GEMM / convolution on tensor cores (h884, s1688, s16816, xmma, bf16, fp16, tf32, wgmma)
};

/// Classifies a kernel name (docs/findings.md `fp32_math` lists the markers).
KernelMath kernel_math(std::string_view kernel_name);

/// A fused attention kernel: FlashAttention, memory-efficient attention, cuDNN SDPA (`flash_fwd`, `fmha`,
/// `efficient_attention`, ...).
bool is_fused_attention_kernel(std::string_view kernel_name);

/// A short display form of a kernel or operator name (template arguments and parameters elided).
std::string short_name(const std::string& name, std::size_t width = 60);

/// Display forms for the rows of one table: short_name of each, except that names which would print alike
/// (`vectorized_elementwise_kernel<…>` for an add and a mul) keep their first distinguishing template
/// argument
/// (`vectorized_elementwise_kernel<…, CUDAFunctor_add<float>, …>`), else a " #k" suffix; never two equal.
std::vector<std::string> short_names(const std::vector<std::string>& names, std::size_t width = 60);

}  // namespace gm::trace
