// MFU of a supervised run: the client's FLOPs per token, and the live figure of the status line.
#include "guard/live_mfu.h"

namespace gm::guard {

void adopt_client_flops(store::RunRecord& run, const ProgressUpdate& update) {
  if (!update.flops_per_token) return;
  if (run.flops_per_token && run.mfu_basis && *run.mfu_basis != kClientFlopsBasis) return;
  run.flops_per_token = update.flops_per_token;
  run.mfu_basis = kClientFlopsBasis;
  if (!run.mfu_precision) run.mfu_precision = "bf16";
}

std::optional<double> live_mfu(const store::RunRecord& run,
                               const std::optional<store::ProgressRecord>& latest,
                               const std::vector<meter::GpuUsage>& gpus, std::optional<double> peak_tflops,
                               std::size_t allocated, double elapsed_s) {
  if (!latest || !latest->tokens || !run.flops_per_token || !peak_tflops) return std::nullopt;
  const auto first = meter::earliest_busy_ms(gpus);
  if (!first) return std::nullopt;
  const auto mfu =
      meter::model_flops_utilization(static_cast<double>(*latest->tokens), *run.flops_per_token, *peak_tflops,
                                     allocated, elapsed_s - static_cast<double>(*first) / 1000.0);
  if (mfu && *mfu > 1.0)
    return std::nullopt;  // impossible: the figures reported are wrong (the report says so)
  return mfu;
}

}  // namespace gm::guard
