#include "cli/trace_demo.h"
#include "findings/priced_trace.h"
#include "report/trace_render.h"
#include "trace/trace.h"
#include "util/embedded.h"

namespace gm::cli {

// data/demo/trace.json: a step with a CPU op launching three kernels on two streams, an NCCL kernel, a
// memcpy, a cuda_sync wait on a stream and a Triton-style CPU op carrying a stream argument (neither is GPU
// work).
const char* demo_trace_json() {
  return util::embedded_file("demo/trace.json").value_or("").data();
}

int trace_demo_section(std::optional<MicroUsd> price_micros_per_gpu_hour, const std::string& price_source,
                       std::FILE* out) {
  auto r = trace::analyze_buffer("demo-sample.pt.trace.json", demo_trace_json());
  if (!r) {
    std::fprintf(stderr, "gpumeter demo: error: %s\n", r.error().message.c_str());
    return 1;
  }
  report::TraceRenderOptions options;
  options.top = 5;
  const auto priced = findings::price_trace({std::move(*r)}, {price_micros_per_gpu_hour, price_source},
                                            nullptr, std::int64_t{10000});
  std::fputs("== gpumeter trace: where the money goes in a PyTorch profiler trace ==\n", out);
  std::fputs(report::trace_text(priced, options).c_str(), out);
  return 0;
}

}  // namespace gm::cli
