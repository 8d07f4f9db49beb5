#include "report/kpi.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "meter/meter.h"
#include "util/units.h"

namespace gm::report {

std::optional<TargetHit> cost_to_target(const std::vector<store::ProgressRecord>& progress,
                                        const meter::MetricTarget& target) {
  std::vector<const store::ProgressRecord*> sorted;
  sorted.reserve(progress.size());
  for (const auto& p : progress) sorted.push_back(&p);
  std::stable_sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->t_ms < b->t_ms; });
  for (const auto* p : sorted) {
    auto it = p->metrics.find(target.metric);
    if (it == p->metrics.end() || !std::isfinite(it->second)) continue;
    bool met = target.at_most ? it->second <= target.threshold : it->second >= target.threshold;
    if (met) return TargetHit{p->t_ms, p->step, it->second, p->cost_micros};
  }
  return std::nullopt;
}

namespace {
std::optional<std::int64_t> max_of(const std::vector<store::ProgressRecord>& progress,
                                   std::optional<std::int64_t> store::ProgressRecord::*field) {
  std::optional<std::int64_t> best;
  for (const auto& p : progress)
    if (p.*field && (!best || *(p.*field) > *best)) best = *(p.*field);
  return best;
}
}  // namespace

std::optional<std::int64_t> progress_max_samples(const std::vector<store::ProgressRecord>& progress) {
  return max_of(progress, &store::ProgressRecord::samples);
}
std::optional<std::int64_t> progress_max_tokens(const std::vector<store::ProgressRecord>& progress) {
  return max_of(progress, &store::ProgressRecord::tokens);
}
std::optional<std::int64_t> progress_max_step(const std::vector<store::ProgressRecord>& progress) {
  return max_of(progress, &store::ProgressRecord::step);
}

std::optional<double> progress_last_metric(const std::vector<store::ProgressRecord>& progress,
                                           const std::string& metric) {
  std::optional<double> value;
  std::int64_t best_t = 0;
  for (const auto& p : progress) {
    auto it = p.metrics.find(metric);
    if (it == p.metrics.end()) continue;
    if (!value || p.t_ms >= best_t) {
      value = it->second;
      best_t = p.t_ms;
    }
  }
  return value;
}

std::optional<double> progress_rate_per_s(const std::vector<store::ProgressRecord>& progress,
                                          std::optional<std::int64_t> store::ProgressRecord::*field) {
  const store::ProgressRecord* first = nullptr;
  const store::ProgressRecord* last = nullptr;
  for (const auto& p : progress) {
    if (!(p.*field)) continue;
    if (!first || p.t_ms < first->t_ms) first = &p;
    if (!last || p.t_ms >= last->t_ms) last = &p;
  }
  if (!first) return std::nullopt;
  if (first == last || last->t_ms == first->t_ms) {
    if (last->t_ms <= 0) return std::nullopt;
    return static_cast<double>(*(last->*field)) * 1000.0 / static_cast<double>(last->t_ms);
  }
  return static_cast<double>(*(last->*field) - *(first->*field)) * 1000.0 /
         static_cast<double>(last->t_ms - first->t_ms);
}

double model_flops_per_token(double params, bool training) {
  return (training ? 6.0 : 2.0) * params;
}

std::optional<double> dense_peak_flops(const catalog::GpuSpec& gpu) {
  for (const auto& v : {gpu.bf16_dense_tflops, gpu.fp16_dense_tflops, gpu.tf32_dense_tflops, gpu.fp32_tflops})
    if (v && *v > 0) return *v * 1e12;
  return std::nullopt;
}

std::optional<double> mfu(double tokens_per_s, double flops_per_token, double peak_flops_per_gpu,
                          std::size_t gpus) {
  if (gpus == 0 || peak_flops_per_gpu <= 0 || tokens_per_s < 0 || flops_per_token <= 0) return std::nullopt;
  return tokens_per_s * flops_per_token / (peak_flops_per_gpu * static_cast<double>(gpus));
}

RunKpis compute_kpis(const store::RunRecord& run, const std::vector<store::ProgressRecord>& progress,
                     const catalog::GpuSpec* gpu, const KpiOptions& options) {
  RunKpis k;
  k.steps = progress_max_step(progress);
  k.samples = progress_max_samples(progress);
  k.tokens = progress_max_tokens(progress);
  k.usd_per_step = meter::usd_per_units(run.cost_micros, k.steps, 1.0);
  k.usd_per_1k_samples = meter::usd_per_units(run.cost_micros, k.samples, 1e3);
  k.usd_per_1m_tokens = meter::usd_per_units(run.cost_micros, k.tokens, 1e6);
  k.tokens_per_s = progress_rate_per_s(progress, &store::ProgressRecord::tokens);
  k.samples_per_s = progress_rate_per_s(progress, &store::ProgressRecord::samples);

  std::optional<double> params = options.params;
  if (!params) {
    auto it = run.labels.find("params");
    if (it != run.labels.end()) {
      auto parsed = util::parse_number(it->second);
      if (parsed) params = *parsed;
    }
  }
  if (gpu) k.peak_flops_per_gpu = dense_peak_flops(*gpu);
  if (params) k.model_flops_per_token = model_flops_per_token(*params, options.training);
  const std::size_t gpus = run.gpus_allocated.size();
  if (!params) {
    k.mfu_note = "no model size (--params N or run label params=N)";
  } else if (!k.tokens_per_s) {
    k.mfu_note = "no token counts in progress";
  } else if (!k.peak_flops_per_gpu) {
    k.mfu_note = "dense peak of GPU '" + run.gpu_model + "' not in the catalog";
  } else if (gpus == 0) {
    k.mfu_note = "no allocated GPUs recorded";
  } else {
    k.mfu = mfu(*k.tokens_per_s, *k.model_flops_per_token, *k.peak_flops_per_gpu, gpus);
    k.mfu_note = std::string(options.training ? "6" : "2") + " x params FLOPs/token, dense peak of " +
                 (gpu ? gpu->id : run.gpu_model) + " x " + std::to_string(gpus) + " GPU(s)";
  }
  if (options.target) {
    k.target = options.target;
    k.target_hit = cost_to_target(progress, *options.target);
  }
  return k;
}

Result<ScalingStudy> scaling_study(const std::vector<ScalingInput>& runs) {
  if (runs.size() < 2) return make_error(ErrorKind::usage, "--scaling needs at least two runs");
  ScalingStudy study;
  struct Unit {
    const char* name;
    std::optional<std::int64_t> store::ProgressRecord::*field;
  };
  const Unit units[] = {{"tokens", &store::ProgressRecord::tokens},
                        {"samples", &store::ProgressRecord::samples},
                        {"steps", &store::ProgressRecord::step}};
  const Unit* chosen = nullptr;
  for (const auto& u : units) {
    bool all = true;
    for (const auto& r : runs)
      if (!progress_rate_per_s(r.progress, u.field)) all = false;
    if (all) {
      chosen = &u;
      break;
    }
  }
  study.unit = chosen ? chosen->name : "runs";
  for (const auto& r : runs) {
    ScalingRow row;
    row.run_id = r.run.id;
    row.gpus = r.run.gpus_allocated.size();
    if (row.gpus == 0)
      return make_error(ErrorKind::usage,
                        "run " + std::to_string(r.run.id) + " has no allocated GPUs recorded");
    if (chosen) {
      row.throughput_per_s = *progress_rate_per_s(r.progress, chosen->field);
      row.usd_per_unit = meter::usd_per_units(r.run.cost_micros, max_of(r.progress, chosen->field), 1.0);
    } else {
      if (r.run.wall_ms <= 0)
        return make_error(ErrorKind::usage, "run " + std::to_string(r.run.id) + " has no wall time");
      row.throughput_per_s = 1000.0 / static_cast<double>(r.run.wall_ms);
      row.usd_per_unit = util::micros_to_usd(r.run.cost_micros);
    }
    study.rows.push_back(row);
  }
  std::stable_sort(study.rows.begin(), study.rows.end(), [](auto& a, auto& b) { return a.gpus < b.gpus; });
  const ScalingRow base = study.rows.front();
  for (auto& row : study.rows) {
    row.speedup = base.throughput_per_s > 0 ? row.throughput_per_s / base.throughput_per_s : 0;
    row.efficiency = row.speedup / (static_cast<double>(row.gpus) / static_cast<double>(base.gpus));
    if (row.usd_per_unit && base.usd_per_unit && *base.usd_per_unit > 0)
      row.cost_ratio = meter::usd_ratio(*row.usd_per_unit, *base.usd_per_unit);
  }
  return study;
}

}  // namespace gm::report
