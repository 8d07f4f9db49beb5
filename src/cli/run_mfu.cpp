// `run` / `attach` --model, --flops-per-token, --seq, --precision: what the run's MFU is measured with.
#include <fmt/format.h>

#include <cstdio>

#include "catalog/catalog.h"
#include "cli/run_support.h"
#include "plan/plan.h"
#include "util/exit_codes.h"

namespace gm::cli {

void add_mfu_flags(CLI::App& app, RunFlags& f) {
  app.add_option("--model", f.model,
                 "the model the job trains (as plan --model: the planner's table, a Hugging Face config file "
                 "or folder, a TOML file): its training FLOPs per token give the run's MFU from the tokens "
                 "the job reports");
  app.add_option("--flops-per-token", f.flops_per_token,
                 "model FLOPs per trained token for the run's MFU (instead of --model)");
  app.add_option("--seq", f.seq,
                 "with --model: the sequence length of the attention term (default: the model's)");
  app.add_option("--precision", f.precision,
                 "whose dense peak MFU divides by: bf16 (default), fp16, fp8, tf32 or fp32");
}

std::optional<int> apply_mfu_flags(const RunFlags& f, const catalog::GpuSpec* gpu, const char* command,
                                   guard::SessionConfig& cfg) {
  auto usage = [command](const std::string& msg) {
    std::fprintf(stderr, "gpumeter %s: error: %s\nRun 'gpumeter %s --help' for usage.\n", command,
                 msg.c_str(), command);
    return std::optional<int>(util::kExitUsage);
  };
  auto mfu = plan::resolve_run_mfu(f.model, f.flops_per_token, f.seq, f.precision);
  if (!mfu) return usage(mfu.error().message);
  if (mfu->flops_per_token) {
    cfg.run.flops_per_token = *mfu->flops_per_token;
    cfg.run.mfu_basis = mfu->basis;
  }
  cfg.run.mfu_precision = f.precision;
  if (gpu != nullptr) cfg.mfu_peak_tflops = plan::dense_peak_tflops(*gpu, f.precision);
  return std::nullopt;
}

}  // namespace gm::cli
