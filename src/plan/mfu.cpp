// The figures a run's MFU is measured with (docs/plan.md "MFU"): training FLOPs per token of a model, and
// the dense peak of a GPU at a precision.
#include <cmath>

#include "plan/plan.h"

namespace gm::plan {

Result<FlopsPerToken> run_flops_per_token(std::string_view name_or_path, std::optional<int> seq,
                                          const ModelSearch& search) {
  GM_TRY(ModelSpec model, resolve_model(name_or_path, search));
  if (model.arch == Arch::cnn)
    return make_error(ErrorKind::usage, "--model " + std::string(name_or_path) + ": " + model.name +
                                            " is a CNN: its work is counted in samples, not tokens");
  const int s = seq.value_or(model.seq);
  if (s <= 0 && model.has_transformer_shape())
    return make_error(ErrorKind::usage, "--model " + std::string(name_or_path) +
                                            ": the model has no context length; give --seq");
  FlopsPerToken out;
  out.flops = training_flops_per_token(model, s);
  out.basis = "model " + model.name + ": the planner's training FLOPs per token (6·N + attention at seq " +
              std::to_string(s) + ")";
  return out;
}

std::optional<double> dense_peak_tflops(const catalog::GpuSpec& gpu, std::string_view precision) {
  if (precision == "bf16") return gpu.bf16_dense_tflops;
  if (precision == "fp16") return gpu.fp16_dense_tflops;
  if (precision == "fp8") return gpu.fp8_dense_tflops;
  if (precision == "tf32") return gpu.tf32_dense_tflops;
  if (precision == "fp32") return gpu.fp32_tflops;
  return std::nullopt;
}

Result<RunMfuBasis> resolve_run_mfu(const std::optional<std::string>& model,
                                    std::optional<double> flops_per_token, std::optional<int> seq,
                                    const std::string& precision) {
  auto usage = [](std::string message) { return make_error(ErrorKind::usage, std::move(message)); };
  if (precision != "bf16" && precision != "fp16" && precision != "fp8" && precision != "tf32" &&
      precision != "fp32")
    return usage("--precision '" + precision + "': expected bf16, fp16, fp8, tf32 or fp32");
  if (model && flops_per_token) return usage("--model and --flops-per-token: give one of them");
  if (seq && !model) return usage("--seq needs --model");
  if (seq && *seq <= 0) return usage("--seq must be a positive integer");
  RunMfuBasis out;
  if (flops_per_token) {
    if (!std::isfinite(*flops_per_token) || *flops_per_token <= 0)
      return usage("--flops-per-token must be a positive number of FLOPs");
    out.flops_per_token = *flops_per_token;
    out.basis = "--flops-per-token";
  } else if (model) {
    auto flops = run_flops_per_token(*model, seq, hf_hub_search());
    if (!flops) return usage(flops.error().message);
    out.flops_per_token = flops->flops;
    out.basis = flops->basis;
  }
  return out;
}

}  // namespace gm::plan
