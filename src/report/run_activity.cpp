// MFU of a run and its GPUs' GPM activity (docs/run.md "MFU", "GPU activity").
#include "report/detail/run_activity.h"

#include <fmt/format.h>

#include <cmath>

#include "plan/plan.h"

namespace gm::report::detail {

void add_run_mfu(RunReport& r, const catalog::Catalog* catalog) {
  const store::RunRecord& run = r.run;
  if (!run.flops_per_token) return;
  r.flops_per_token = run.flops_per_token;
  const std::string precision = run.mfu_precision.value_or("bf16");
  r.mfu_basis = run.mfu_basis.value_or("") + "; peak: " + precision + " dense";
  const catalog::GpuSpec* gpu =
      catalog != nullptr && !run.gpu_model.empty() ? catalog->find_gpu(run.gpu_model) : nullptr;
  const std::optional<double> peak = gpu != nullptr ? plan::dense_peak_tflops(*gpu, precision) : std::nullopt;
  if (!r.tokens) {
    r.notes.push_back("MFU not measured: the job reported no tokens (progress(tokens=...))");
    return;
  }
  if (!peak) {
    r.notes.push_back("MFU not measured: the catalog has no " + precision + " dense peak for GPU " +
                      (run.gpu_model.empty() ? std::string("(unknown)") : run.gpu_model));
    return;
  }
  // The run's own start-up figure (report startup_s), else when its GPUs first worked.
  std::optional<std::int64_t> startup_ms =
      r.startup ? std::optional(r.startup->ms) : meter::earliest_busy_ms(r.gpus);
  if (!startup_ms) {
    r.notes.push_back("MFU not measured: the GPUs never worked");
    return;
  }
  const double seconds = r.wall_s - static_cast<double>(*startup_ms) / 1000.0;
  r.mfu = meter::model_flops_utilization(static_cast<double>(*r.tokens), *run.flops_per_token, *peak,
                                         run.gpus_allocated.size(), seconds);
  if (r.mfu && *r.mfu > 1.0) {
    // More FLOPs than the GPUs can do: the tokens or the FLOPs per token reported are too high.
    r.notes.push_back(fmt::format(
        "MFU not shown: {} tokens × {:g} FLOPs per token would be {:.0f}% of the GPUs' {} dense peak; the "
        "tokens or the FLOPs per token reported are too high",
        *r.tokens, *run.flops_per_token, *r.mfu * 100.0, precision));
    r.mfu.reset();
  }
  if (r.mfu)
    r.mfu_basis = *r.mfu_basis + fmt::format(" {:g} TFLOPS × {} GPU × {:.1f} s after start-up", *peak,
                                             run.gpus_allocated.size(), seconds);
}

void add_gpm_json(nlohmann::json& g, const store::GpmPct& gpm) {
  auto pct = [](const std::optional<double>& v) {
    return v ? nlohmann::json(std::round(*v * 10.0) / 10.0) : nlohmann::json(nullptr);
  };
  g["sm_active_pct"] = pct(gpm.sm_active);
  g["sm_occupancy_pct"] = pct(gpm.sm_occupancy);
  g["tensor_active_pct"] = pct(gpm.tensor_active);
  g["fp32_active_pct"] = pct(gpm.fp32_active);
  g["fp16_active_pct"] = pct(gpm.fp16_active);
  g["fp64_active_pct"] = pct(gpm.fp64_active);
  g["dram_bw_util_pct"] = pct(gpm.dram_bw_util);
}

std::string gpm_text(const store::GpmPct& gpm) {
  std::string out;
  auto add = [&out](const char* name, const std::optional<double>& v) {
    if (v) out += fmt::format("{}{} {:.0f}%", out.empty() ? "" : " · ", name, *v);
  };
  add("SM", gpm.sm_active);
  add("tensor", gpm.tensor_active);
  add("FP32", gpm.fp32_active);
  add("FP16", gpm.fp16_active);
  add("FP64", gpm.fp64_active);
  add("DRAM", gpm.dram_bw_util);
  add("occupancy", gpm.sm_occupancy);
  return out;
}

}  // namespace gm::report::detail
