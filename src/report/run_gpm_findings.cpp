// Run findings from NVML GPM activity, with no trace (docs/findings.md): fp32_math, low_tensor_activity,
// memory_bound. Each concerns the cost of the used GPUs' busy time (cost × utilization).
#include <fmt/format.h>

#include <algorithm>

#include "meter/meter.h"
#include "report/detail/run_activity.h"
#include "util/units.h"

namespace gm::report::detail {
namespace {

using findings::Finding;
using findings::Severity;

/// The run's GPM activity while working, over the GPUs that measured it (weighted by their intervals), and
/// the cost of those GPUs' busy time.
struct RunActivity {
  store::GpmPct mean;
  MicroUsd busy_micros = 0;
  std::int64_t intervals = 0;
};

RunActivity run_activity(const RunReport& r) {
  RunActivity a;
  double sum[7] = {}, weight[7] = {};
  std::optional<double> store::GpmPct::*fields[] = {
      &store::GpmPct::sm_active,   &store::GpmPct::sm_occupancy, &store::GpmPct::tensor_active,
      &store::GpmPct::fp32_active, &store::GpmPct::fp16_active,  &store::GpmPct::fp64_active,
      &store::GpmPct::dram_bw_util};
  for (const meter::GpuUsage& g : r.gpus) {
    if (g.activity.intervals() == 0) continue;
    const store::GpmPct m = g.activity.mean();
    const auto w = static_cast<double>(g.activity.intervals());
    for (std::size_t i = 0; i < 7; ++i)
      if (m.*fields[i]) {
        sum[i] += *(m.*fields[i]) * w;
        weight[i] += w;
      }
    a.intervals += g.activity.intervals();
    a.busy_micros += meter::busy_micros(g.cost_micros, g.idle_cost_micros);
  }
  for (std::size_t i = 0; i < 7; ++i)
    if (weight[i] > 0) a.mean.*fields[i] = sum[i] / weight[i];
  return a;
}

// A GPM finding's dollars, severity and time at stake: the part of the run's cost (and time) it concerns.
void price(Finding& f, MicroUsd part, const RunReport& r) {
  price_finding(f, part, r);
  f.severity = severity_of(part, r.run.cost_micros);
  f.at_stake_ns =
      static_cast<std::int64_t>(static_cast<double>(r.run.wall_ms) * 1e6 * static_cast<double>(part) /
                                static_cast<double>(std::max<MicroUsd>(1, r.run.cost_micros)));
}

void add_activity_evidence(Finding& f, const RunActivity& a) {
  auto add = [&f](const char* key, const std::optional<double>& v) {
    if (v) f.evidence.push_back({key, *v});
  };
  add("sm_active_pct", a.mean.sm_active);
  add("tensor_active_pct", a.mean.tensor_active);
  add("fp32_active_pct", a.mean.fp32_active);
  add("fp16_active_pct", a.mean.fp16_active);
  add("dram_bw_util_pct", a.mean.dram_bw_util);
  f.evidence.push_back({"working_intervals", a.intervals});
}

bool has_tensor_cores(const catalog::GpuSpec* spec) {
  if (spec == nullptr) return false;
  for (const char* arch : {"Volta", "Turing", "Ampere", "Ada Lovelace", "Hopper", "Blackwell"})
    if (spec->architecture == arch) return true;
  return false;
}

/// The precision the run itself declares: an MFU basis measured at a 16-bit peak.
bool declared_16_bit(const store::RunRecord& run) {
  return run.flops_per_token && run.mfu_precision &&
         (*run.mfu_precision == "bf16" || *run.mfu_precision == "fp16" || *run.mfu_precision == "fp8");
}

constexpr const char* kMixedPrecisionAction =
    "train in mixed precision: torch.autocast(\"cuda\", dtype=torch.bfloat16) around the forward pass and "
    "loss; for what stays fp32 set torch.backends.cuda.matmul.allow_tf32 = True (and "
    "torch.backends.cudnn.allow_tf32); convolutions: model.to(memory_format=torch.channels_last)";

}  // namespace

void add_gpm_findings(RunReport& r, const catalog::Catalog* catalog) {
  const store::RunRecord& run = r.run;
  // Like the utilization findings: nothing about the math of a run that never reached its steady state.
  if (run.price_micros_per_gpu_hour <= 0 || run.wall_ms <= 0 || r.steady_state == false) return;
  const RunActivity a = run_activity(r);
  if (a.intervals == 0 || a.busy_micros <= 0) return;
  const catalog::GpuSpec* spec =
      catalog != nullptr && !run.gpu_model.empty() ? catalog->find_gpu(run.gpu_model) : nullptr;
  const std::size_t before = r.findings.size();
  const double tensor = a.mean.tensor_active.value_or(-1), fp32 = a.mean.fp32_active.value_or(-1);
  const double fp16 = a.mean.fp16_active.value_or(0), sm = a.mean.sm_active.value_or(-1);
  const double dram = a.mean.dram_bw_util.value_or(-1);

  bool fp32_found = false;
  if (has_tensor_cores(spec) && tensor >= 0 && tensor < kGpmTensorIdlePct && fp32 >= kGpmFp32BusyPct) {
    Finding f;
    f.kind = "fp32_math";
    double speedup = 2.0;
    std::string basis = "assumed 2x: the catalog has no fp32 and tensor-core figures for this GPU";
    const std::optional<double> tc =
        spec->bf16_dense_tflops ? spec->bf16_dense_tflops : spec->fp16_dense_tflops;
    if (tc && spec->fp32_tflops && *spec->fp32_tflops > 0 && *tc > *spec->fp32_tflops) {
      speedup = *tc / *spec->fp32_tflops;
      basis = fmt::format(
          "{}: dense tensor-core {:g} TFLOPS / fp32 {:g} TFLOPS (catalog peak figures; an upper bound, "
          "memory-bound shapes gain less)",
          spec->id, *tc, *spec->fp32_tflops);
    }
    // The FP32 pipe's share of the busy time moves to tensor cores at the speed-up.
    const MicroUsd part =
        meter::part_of_micros(a.busy_micros, std::min(1.0, fp32 / 100.0), 1.0 - 1.0 / speedup);
    f.summary = fmt::format(
        "while the GPUs worked, the FP32 pipes were busy {:.0f}% of the time and the tensor cores {:.0f}% "
        "(NVML GPM) on {}, a GPU with tensor cores: the math runs in fp32 on the CUDA cores",
        fp32, tensor, spec->id);
    f.action = kMixedPrecisionAction;
    add_activity_evidence(f, a);
    f.evidence.push_back({"speedup_assumed", speedup});
    f.evidence.push_back({"speedup_basis", basis});
    f.evidence.push_back({"gpu", spec->id});
    price(f, part, r);
    r.findings.push_back(std::move(f));
    fp32_found = true;
  }

  // A 16-bit job: it says so (MFU at a 16-bit peak), or its tensor cores or FP16 pipes run at all.
  const bool sixteen_bit = declared_16_bit(run) || tensor >= 1.0 || fp16 >= 1.0;
  if (!fp32_found && sixteen_bit && tensor >= 0 && tensor < kGpmLowTensorPct && sm >= kGpmSmBusyPct) {
    Finding f;
    f.kind = "low_tensor_activity";
    const MicroUsd part = meter::part_of_micros(a.busy_micros, 1.0 - tensor / 100.0);
    f.summary = fmt::format(
        "a 16-bit job whose SMs were active {:.0f}% of the working time kept its tensor cores busy only "
        "{:.0f}% (NVML GPM): the time goes to element-wise operations, unfused attention or small matrix "
        "products{}",
        sm, tensor, r.mfu ? fmt::format(" (MFU {:.0f}%)", *r.mfu * 100.0) : std::string());
    f.action =
        "profile a few steps (torch.profiler) and run `gpumeter trace` on the result to see which kernels "
        "hold the SMs; fuse element-wise operations (torch.compile), use fused attention "
        "(attn_implementation=\"sdpa\" or flash attention), and raise the micro-batch so matrix products "
        "dominate";
    add_activity_evidence(f, a);
    if (declared_16_bit(run)) f.evidence.push_back({"precision", *run.mfu_precision});
    price(f, part, r);
    r.findings.push_back(std::move(f));
  }

  if (dram >= kGpmDramHighPct && sm >= 0 && sm < kGpmSmBusyPct) {
    Finding f;
    f.kind = "memory_bound";
    const MicroUsd part = meter::part_of_micros(a.busy_micros, 1.0 - sm / 100.0);
    f.summary = fmt::format(
        "DRAM bandwidth ran at {:.0f}% of its peak while the SMs were active only {:.0f}% (NVML GPM): the "
        "job waits on memory, not math",
        dram, sm);
    f.action =
        "raise the arithmetic intensity: fuse element-wise operations (torch.compile), keep activations and "
        "weights in bf16 (half the bytes), avoid extra copies and .float() casts, and use a larger batch; "
        "`gpumeter trace` on a torch.profiler trace names the kernels that move the bytes";
    add_activity_evidence(f, a);
    price(f, part, r);
    r.findings.push_back(std::move(f));
  }

  if (r.findings.size() != before)
    std::stable_sort(r.findings.begin(), r.findings.end(), [](const Finding& x, const Finding& y) {
      if (x.severity != y.severity) return x.severity > y.severity;
      return x.cost_nano_usd.value_or(0) > y.cost_nano_usd.value_or(0);
    });
}

}  // namespace gm::report::detail
