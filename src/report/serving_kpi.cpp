// Serving KPIs of a run that wrapped an inference server: $/1M tokens, $/1k requests, tokens/s, and the
// cost at the observed peak throughput (saturation). Definitions: docs/inference.md.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "plan/plan.h"
#include "report/kpi.h"

namespace gm::report {

std::optional<ServingKpis> serving_kpis(const store::RunRecord& run,
                                        const std::vector<store::InferenceRecord>& records) {
  if (records.empty()) return std::nullopt;
  ServingKpis k;
  // Records are cumulative per model; the last one of each model holds its totals.
  std::map<std::string, const store::InferenceRecord*> last;
  for (const auto& r : records) last[r.model] = &r;
  auto add = [](std::optional<double>& sum, const std::optional<double>& v) {
    if (v) sum = sum.value_or(0) + *v;
  };
  for (const auto& [model, r] : last) {
    k.models.push_back(model);
    if (!r->engine.empty()) k.engine = r->engine;
    add(k.prompt_tokens, r->prompt_tokens);
    add(k.generated_tokens, r->generated_tokens);
    add(k.cached_tokens, r->cached_tokens);
    add(k.requests, r->requests);
  }
  const double cost_usd = util::micros_to_usd(run.cost_micros);
  const bool priced = run.price_micros_per_gpu_hour > 0;
  auto per = [&](std::optional<double> count, double unit) -> std::optional<double> {
    if (!priced || !count || !(*count > 0)) return std::nullopt;
    return meter::usd_per(cost_usd, *count, unit);
  };
  k.usd_per_1m_prompt_tokens = per(k.prompt_tokens, 1e6);
  k.usd_per_1m_generated_tokens = per(k.generated_tokens, 1e6);
  if (k.prompt_tokens || k.generated_tokens)
    k.usd_per_1m_tokens = per(k.prompt_tokens.value_or(0) + k.generated_tokens.value_or(0), 1e6);
  k.usd_per_1k_requests = per(k.requests, 1e3);
  const double wall_s = static_cast<double>(run.wall_ms) / 1000.0;
  if (k.generated_tokens && wall_s > 0) k.generated_tokens_per_s = *k.generated_tokens / wall_s;

  // Generated tokens over time, summed over models (a model keeps its last value between its records),
  // from zero at the run's start.
  std::vector<std::pair<std::int64_t, double>> series{{0, 0.0}};
  std::map<std::string, double> current;
  for (std::size_t i = 0; i < records.size(); ++i) {
    if (records[i].generated_tokens) current[records[i].model] = *records[i].generated_tokens;
    if (i + 1 < records.size() && records[i + 1].t_ms == records[i].t_ms) continue;
    double sum = 0;
    for (const auto& [m, v] : current) sum += v;
    if (records[i].t_ms > series.back().first)
      series.emplace_back(records[i].t_ms, sum);
    else
      series.back().second = sum;
  }
  // Peak: the highest rate over any window of at least kSaturationWindowMs between two points (the whole
  // span when the run is shorter).
  std::optional<double> peak;
  std::size_t j = 0;
  for (std::size_t i = 1; i < series.size(); ++i) {
    while (j + 1 < i && series[i].first - series[j + 1].first >= kSaturationWindowMs) ++j;
    if (series[i].first - series[j].first < kSaturationWindowMs) continue;
    const double rate = (series[i].second - series[j].second) /
                        (static_cast<double>(series[i].first - series[j].first) / 1000.0);
    peak = std::max(peak.value_or(0), rate);
  }
  // The whole run is one of those stretches too: the peak is never under the run's own mean rate (the scan
  // above looks at the shortest stretch ending at each sample only).
  if (series.size() >= 2 && series.back().first > 0)
    peak = std::max(peak.value_or(0),
                    series.back().second / (static_cast<double>(series.back().first) / 1000.0));
  if (peak && *peak > 0) {
    k.peak_generated_tokens_per_s = peak;
    if (k.generated_tokens_per_s) k.load_ratio = std::min(1.0, *k.generated_tokens_per_s / *peak);
    if (priced && wall_s > 0)
      k.usd_per_1m_generated_tokens_at_peak =
          meter::usd_per_million(meter::usd_ratio(cost_usd, wall_s), *peak);
  }
  return k;
}

void add_plan_prediction(ServingKpis& k, const store::RunRecord& run, const catalog::Catalog& catalog) {
  if (k.models.size() != 1) {
    k.plan_note = fmt::format("{} models served: the plan predicts one model at a time", k.models.size());
    return;
  }
  auto model = plan::find_served_model(k.models[0]);
  if (!model) {
    k.plan_note =
        fmt::format("model '{}' is not in the plan's model table (gpumeter plan --help)", k.models[0]);
    return;
  }
  const catalog::GpuSpec* gpu = catalog.find_gpu(run.gpu_model);
  if (gpu == nullptr) {
    k.plan_note = fmt::format("GPU '{}' is not in the catalog", run.gpu_model);
    return;
  }
  const auto gpus = static_cast<int>(run.gpus_allocated.size());
  if (gpus == 0 || run.price_micros_per_gpu_hour <= 0 || !k.requests || !(*k.requests > 0) ||
      !k.generated_tokens || !(*k.generated_tokens > 0)) {
    k.plan_note = "no GPUs, no price or no completed requests to take the request shape from";
    return;
  }
  const double prompt = k.prompt_tokens.value_or(0) / *k.requests;
  const double output = *k.generated_tokens / *k.requests;
  plan::OfferContext ctx;
  ctx.offer.provider = "this run";
  ctx.offer.instance = "its GPUs";
  ctx.offer.gpu = gpu->id;
  ctx.offer.gpu_count = gpus;
  ctx.offer.ondemand_usd_per_hour = meter::usd_per_hour_of_gpus(run.price_micros_per_gpu_hour, gpus);
  ctx.gpu = *gpu;
  ctx.billing.provider = "this run";  // per second, no minimum: the run's own cost is its GPU-seconds
  std::optional<double> best;
  for (int batch = 1; batch <= 1024; batch *= 2) {
    plan::PlanRequest req;
    req.job.model = *model;
    req.job.task = plan::Task::inference;
    req.job.tokens = 1e6;
    req.job.prompt_tokens = std::max(1, static_cast<int>(std::lround(prompt)));
    req.job.seq = req.job.prompt_tokens + std::max(1, static_cast<int>(std::lround(output)));
    req.job.batch = batch;
    req.job = plan::resolve_job_defaults(req.job, true, false, false);
    req.gpus = gpus;
    req.gpu = gpu->id;
    auto result = plan::make_plan(req, {ctx});
    if (!result || result->options.empty() || !result->options[0].fits) break;  // larger batches fit less
    const auto& usd = result->options[0].usd_per_million_tokens;
    if (usd && (!best || *usd < *best)) {
      best = usd;
      k.plan_batch = batch;
    }
  }
  if (!best) {
    k.plan_note =
        fmt::format("{} does not fit on {} {} in the plan's memory model", model->name, gpus, gpu->id);
    return;
  }
  k.plan_usd_per_1m_generated_tokens = best;
  k.plan_model = model->name;
}

}  // namespace gm::report
