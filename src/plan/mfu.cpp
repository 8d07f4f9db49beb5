// The figures a run's MFU is measured with (docs/plan.md "MFU"): training FLOPs per token of a model, and
// the dense peak of a GPU at a precision.
#include <filesystem>

#include "plan/plan.h"

namespace gm::plan {

Result<ModelSpec> resolve_mfu_model(std::string_view name_or_path) {
  const std::string text(name_or_path);
  std::error_code ec;
  const bool looks_like_path = text.find('/') != std::string::npos || std::filesystem::exists(text, ec);
  if (!looks_like_path) return find_model(text);
  if (text.size() > 5 && text.ends_with(".toml")) return load_model_toml(text);
  return make_error(ErrorKind::usage, "--model " + text +
                                          ": not a model of the planner's table, and only TOML model files "
                                          "(as `plan --model-file` reads) are read as paths here");
}

Result<FlopsPerToken> training_flops_per_token(std::string_view name_or_path, std::optional<int> seq) {
  GM_TRY(ModelSpec model, resolve_mfu_model(name_or_path));
  if (model.arch == Arch::cnn)
    return make_error(ErrorKind::usage, "--model " + std::string(name_or_path) + ": " + model.name +
                                            " is a CNN: its work is counted in samples, not tokens");
  JobSpec job;
  job.model = model;
  job.task = Task::train;
  job.tokens = 1.0;
  job.seq = seq.value_or(model.seq);
  if (job.seq <= 0 && model.has_transformer_shape())
    return make_error(ErrorKind::usage, "--model " + std::string(name_or_path) +
                                            ": the model has no context length; give --seq");
  const ComputeEstimate c = estimate_compute(job);
  FlopsPerToken out;
  out.flops = c.model_flops;
  out.basis = "model " + model.name + ": training FLOPs per token 6·N" +
              (c.attention_flops > 0 ? " + 12·L·h·s at seq " + std::to_string(job.seq) : std::string()) +
              " (the planner's model FLOPs)";
  return out;
}

std::optional<double> dense_peak_tflops(const GpuSpec& gpu, std::string_view precision) {
  if (precision == "bf16") return gpu.bf16_dense_tflops;
  if (precision == "fp16") return gpu.fp16_dense_tflops;
  if (precision == "fp8") return gpu.fp8_dense_tflops;
  if (precision == "tf32") return gpu.tf32_dense_tflops;
  if (precision == "fp32") return gpu.fp32_tflops;
  return std::nullopt;
}

}  // namespace gm::plan
