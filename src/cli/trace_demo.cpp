#include "cli/trace_demo.h"

#include "report/trace_render.h"
#include "trace/trace.h"

namespace gm::cli {
namespace {

// A step with a CPU op launching three kernels on two streams, an NCCL kernel, a memcpy, a cuda_sync
// wait on a stream and a Triton-style CPU op carrying a stream argument (neither is GPU work).
constexpr const char* kDemoTrace = R"J({
  "schemaVersion": 1,
  "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}],
  "distributedInfo": {"backend": "nccl", "rank": 3, "world_size": 8},
  "traceEvents": [
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#7", "pid": 10, "tid": 10, "ts": 1000.000, "dur": 100.0},
    {"ph": "X", "cat": "user_annotation", "name": "forward", "pid": 10, "tid": 10, "ts": 1000.5, "dur": 50},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 10, "tid": 10, "ts": 1001, "dur": 10},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 10, "tid": 10, "ts": 1002, "dur": 1, "args": {"correlation": 1}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 10, "tid": 10, "ts": 1003, "dur": 1, "args": {"correlation": 2}},
    {"ph": "X", "cat": "cpu_op", "name": "triton_op", "pid": 10, "tid": 10, "ts": 1020, "dur": 5, "args": {"stream": 7}},
    {"ph": "X", "cat": "cpu_op", "name": "nccl:all_reduce", "pid": 10, "tid": 10, "ts": 1030, "dur": 5},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 10, "tid": 10, "ts": 1031, "dur": 1, "args": {"correlation": 3}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 10, "tid": 10, "ts": 1040, "dur": 1, "args": {"correlation": 4}},
    {"ph": "X", "cat": "kernel", "name": "gemm_a", "pid": 0, "tid": 7, "ts": 1010.000, "dur": 10.000, "args": {"correlation": 1}},
    {"ph": "X", "cat": "kernel", "name": "gemm_b", "pid": 0, "tid": 8, "ts": 1015.000, "dur": 10.001, "args": {"correlation": 2}},
    {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32", "pid": 0, "tid": 9, "ts": 1018, "dur": 12, "args": {"correlation": 3}},
    {"ph": "X", "cat": "cuda_sync", "name": "cudaStreamSynchronize", "pid": 0, "tid": 7, "ts": 1020, "dur": 30},
    {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pageable)", "pid": 0, "tid": 7, "ts": 1050, "dur": 4, "args": {"correlation": 4}},
    {"ph": "X", "cat": "kernel", "name": "empty", "pid": 0, "tid": 7, "ts": 1060, "dur": 0},
    {"ph": "X", "cat": "kernel", "name": "broken", "pid": 0, "tid": 7, "ts": 1061, "dur": -3},
    {"ph": "f", "id": 1, "pid": 0, "tid": 7, "ts": 1010, "cat": "ac2g", "name": "ac2g", "bp": "e"}
  ],
  "traceName": "x", "displayTimeUnit": "ns", "baseTimeNanoseconds": 1700000000000000000
})J";

}  // namespace

const char* demo_trace_json() { return kDemoTrace; }

int trace_demo_section(std::optional<MicroUsd> price_micros_per_gpu_hour, const std::string& price_source,
                       std::FILE* out) {
  auto r = trace::analyze_buffer("demo-sample.pt.trace.json", kDemoTrace);
  if (!r) {
    std::fprintf(stderr, "gpumeter demo: error: %s\n", r.error().message.c_str());
    return 1;
  }
  report::TraceRenderOptions options;
  options.price_micros_per_gpu_hour = price_micros_per_gpu_hour;
  options.price_source = price_source;
  options.project_steps = 10000;
  options.top = 5;
  std::fputs("== gpumeter trace: where the money goes in a PyTorch profiler trace ==\n", out);
  std::fputs(report::trace_text({*r}, options).c_str(), out);
  return 0;
}

}  // namespace gm::cli
