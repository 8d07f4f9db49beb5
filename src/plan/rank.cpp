// Ranking catalog offers: the fewest GPUs that fit per GPU model, instances per offer, time, cost, spot.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "plan/plan.h"

namespace gm::plan {

namespace {

bool is_training(const JobSpec& job) {
  return job.task != Task::inference;
}

double usable_bytes(const catalog::GpuSpec& gpu) {
  return gpu.memory_bytes > 0 ? static_cast<double>(gpu.memory_bytes) : gpu.memory_gb * 1e9;
}

/// The configuration on `n` GPUs with tensor/pipeline degrees `tp`, `pp`: the lowest ZeRO stage that fits
/// (or the requested one). Returns the configuration and whether it fits.
std::pair<Parallelism, MemoryBreakdown> config_for(const PlanRequest& req, const JobSpec& job, int n, int tp,
                                                   int pp, double capacity) {
  Parallelism par;
  par.tp = tp;
  par.pp = pp;
  par.sp = tp > 1;
  par.dp = std::max(n / (tp * pp), 1);
  std::vector<int> stages;
  if (req.fsdp)
    stages = {3};
  else if (req.zero)
    stages = {*req.zero};
  else if (!is_training(job) || par.dp == 1)
    stages = {0};
  else
    stages = {0, 1, 2, 3};
  MemoryBreakdown mem;
  for (int stage : stages) {
    par.zero = is_training(job) ? stage : 0;
    mem = estimate_memory(job, par);
    if (mem.total_bytes <= capacity) break;
  }
  return {par, mem};
}

/// Tensor/pipeline layouts to try, fewest GPUs first.
std::vector<std::pair<int, int>> layouts(const PlanRequest& req, const JobSpec& job) {
  if (req.tp || req.pp || is_training(job)) return {{req.tp.value_or(1), req.pp.value_or(1)}};
  std::vector<std::pair<int, int>> out;
  const ModelSpec& m = job.model;
  for (int tp = 1; tp <= 8; tp *= 2)
    if (m.heads == 0 || m.heads % tp == 0) out.emplace_back(tp, 1);
  const int tp_max = out.back().first;
  for (int pp = 2; pp <= std::max(m.layers, 2) && tp_max * pp <= req.max_gpus; pp *= 2)
    out.emplace_back(tp_max, pp);
  return out;
}

struct Fit {
  Parallelism par;
  MemoryBreakdown mem;
  bool fits = false;
};

/// The fewest GPUs of this capacity that fit (or the requested count).
Fit fewest_gpus(const PlanRequest& req, const JobSpec& job, double capacity) {
  Fit best;
  bool first = true;
  if (req.gpus || req.dp) {
    const int tp = req.tp.value_or(1), pp = req.pp.value_or(1);
    const int n = req.gpus ? *req.gpus : *req.dp * tp * pp;
    auto [par, mem] = config_for(req, job, n, tp, pp, capacity);
    return {par, mem, mem.total_bytes <= capacity};
  }
  for (auto [tp, pp] : layouts(req, job)) {
    // Training grows data parallelism (sharded by ZeRO); inference grows the model-parallel layout.
    const int max_dp = is_training(job) ? req.max_gpus / (tp * pp) : 1;
    for (int dp = 1; dp <= max_dp; dp *= 2) {
      auto [par, mem] = config_for(req, job, dp * tp * pp, tp, pp, capacity);
      if (first) {
        best = {par, mem, false};
        first = false;
      }
      if (mem.total_bytes <= capacity) return {par, mem, true};
    }
  }
  return best;
}

double billed_hours(double wall_s, const catalog::BillingRule& rule) {
  const double g = static_cast<double>(std::max<std::int64_t>(rule.granularity_s, 1));
  const double billed = std::max(std::ceil(wall_s / g) * g, static_cast<double>(rule.minimum_s));
  return billed / 3600.0;
}

Result<void> validate_request(const PlanRequest& req, const JobSpec& job) {
  const ModelSpec& m = job.model;
  auto positive = [](std::optional<int> v, const char* flag) -> Result<void> {
    if (v && *v <= 0)
      return make_error(ErrorKind::usage, fmt::format("{} must be a positive number, not {}", flag, *v));
    if (v && *v > 65536)
      return make_error(ErrorKind::usage, fmt::format("{} {} is more than 65536 GPUs", flag, *v));
    return ok_result();
  };
  GM_TRY_VOID(positive(req.dp, "--dp"));
  GM_TRY_VOID(positive(req.tp, "--tp"));
  GM_TRY_VOID(positive(req.pp, "--pp"));
  GM_TRY_VOID(positive(req.gpus, "--gpus"));
  if (job.batch <= 0) return make_error(ErrorKind::usage, "--batch must be a positive number");
  if (job.seq <= 0) return make_error(ErrorKind::usage, "--seq must be a positive number");
  if (job.tokens && (!(*job.tokens > 0) || !std::isfinite(*job.tokens)))
    return make_error(ErrorKind::usage, "--tokens must be a positive number");
  if (uses_adapters(job) && job.lora_rank <= 0)
    return make_error(ErrorKind::usage, "--lora-rank must be positive");
  if (req.zero && (*req.zero < 0 || *req.zero > 3))
    return make_error(ErrorKind::usage, "--zero must be 0, 1, 2 or 3");
  if (req.mfu && (!(*req.mfu > 0) || *req.mfu > 1))
    return make_error(ErrorKind::usage, "--mfu must be in (0, 1], e.g. 0.4");
  const int tp = req.tp.value_or(1), pp = req.pp.value_or(1);
  if (m.has_transformer_shape() && m.heads % tp != 0)
    return make_error(ErrorKind::usage, fmt::format("--tp {} does not divide the {} attention heads of {}",
                                                    tp, m.heads, m.name.empty() ? "the model" : m.name));
  if (m.has_transformer_shape() && m.kv_heads > 0 && m.kv_heads % tp != 0 && tp % m.kv_heads != 0)
    return make_error(ErrorKind::usage,
                      fmt::format("--tp {} and the {} key/value heads of {} do not divide one another", tp,
                                  m.kv_heads, m.name.empty() ? "the model" : m.name));
  if (m.layers > 0 && pp > m.layers)
    return make_error(ErrorKind::usage, fmt::format("--pp {} exceeds the {} layers", pp, m.layers));
  if (static_cast<long long>(req.dp.value_or(1)) * tp * pp > 65536)
    return make_error(ErrorKind::usage, "--dp × --tp × --pp is more than 65536 GPUs");
  if (req.gpus && *req.gpus % (tp * pp) != 0)
    return make_error(ErrorKind::usage,
                      fmt::format("--gpus {} is not a multiple of --tp × --pp = {}", *req.gpus, tp * pp));
  if (req.gpus && req.dp && *req.gpus != *req.dp * tp * pp)
    return make_error(ErrorKind::usage, fmt::format("--gpus {} differs from --dp × --tp × --pp = {}",
                                                    *req.gpus, *req.dp * tp * pp));
  if (req.interruptions_per_hour && !(*req.interruptions_per_hour >= 0))
    return make_error(ErrorKind::usage, "--interruption-rate must not be negative");
  if (req.checkpoint_s && !(*req.checkpoint_s >= 0))
    return make_error(ErrorKind::usage, "--checkpoint-s must not be negative");
  if (m.arch == Arch::cnn && job.task == Task::lora)
    return make_error(ErrorKind::usage, "LoRA needs a transformer; this model is a CNN");
  return ok_result();
}

/// Bytes of one full checkpoint: weights and optimizer states of the trainable parameters.
double checkpoint_bytes(const JobSpec& job) {
  if (job.task == Task::inference) return 0;
  if (uses_adapters(job)) {
    const StateBytes s = state_bytes(Precision::fp32, job.optimizer);
    return lora_params(job.model, job.lora_rank) * (s.weights + s.optimizer);
  }
  const StateBytes s = state_bytes(job.precision, job.optimizer);
  return job.model.params * (s.weights + s.optimizer);
}

/// Time, billed hours, cost, $/1M tokens, energy and carbon of one option (spot: with interruptions).
void time_option(const PlanRequest& req, const JobSpec& job, const ComputeEstimate& compute,
                 const OfferContext& ctx, double mfu, int paid, PlanOption& opt) {
  const TimeEstimate t =
      estimate_time(job, compute, opt.memory, opt.parallel, ctx.gpu, mfu, req.bandwidth_efficiency);
  opt.bound = t.bound;
  double wall_s = t.time_s;
  if (req.spot) {
    SpotInputs in;
    in.work_s = t.time_s;
    const double per_instance_rate =
        req.interruptions_per_hour.value_or(default_interruption_rate(opt.provider).value);
    in.interruptions_per_hour = per_instance_rate * opt.instances;
    in.checkpoint_s =
        req.checkpoint_s.value_or(checkpoint_bytes(job) / (req.checkpoint_write_bytes_per_s * opt.instances));
    in.restart_s = req.restart_s;
    if (ctx.billing.spot_notice_s) in.notice_s = static_cast<double>(*ctx.billing.spot_notice_s);
    opt.spot_detail = expected_spot(in);
    opt.interruptions_per_hour = in.interruptions_per_hour;
    wall_s = opt.spot_detail->wall_s;
    if (!opt.spot_detail->feasible) opt.fits = false;
  }
  opt.time_h = wall_s / 3600.0;
  if (std::isfinite(wall_s)) {
    opt.billed_h = billed_hours(wall_s, ctx.billing);
    opt.cost_usd = meter::usd_for_hours(opt.usd_per_hour, *opt.billed_h);
    opt.usd_per_million_tokens = meter::usd_per_million(*opt.cost_usd, *job.tokens);
  } else {
    opt.billed_h = opt.cost_usd = INFINITY;
  }
  if (ctx.gpu.tdp_w && std::isfinite(wall_s)) {
    opt.energy_kwh = paid * *ctx.gpu.tdp_w * *opt.time_h / 1000.0 * ctx.pue.value_or(1.0);
    if (ctx.carbon_g_per_kwh) {
      opt.carbon_kg = *opt.energy_kwh * *ctx.carbon_g_per_kwh / 1000.0;
      opt.carbon_dataset = ctx.carbon_dataset;
    }
  }
}

}  // namespace

Result<PlanResult> make_plan(const PlanRequest& req, const std::vector<OfferContext>& offers) {
  PlanResult out;
  out.job = req.job;
  const JobSpec& job = out.job;
  GM_TRY_VOID(validate_model(job.model));
  GM_TRY_VOID(validate_request(req, job));
  if (job.task == Task::inference && job.prompt_tokens >= job.seq && job.model.arch == Arch::decoder)
    return make_error(
        ErrorKind::usage,
        fmt::format("--prompt-tokens {} leaves no room for output in --seq {}", job.prompt_tokens, job.seq));
  if (job.tokens)
    out.compute = estimate_compute(job);
  else if (req.objective != Objective::cost)
    return make_error(ErrorKind::usage,
                      fmt::format("--optimize {} needs --tokens: time and cost depend on the amount "
                                  "of work; without --tokens plan answers the fit question only",
                                  req.objective == Objective::time ? "time" : "score (--weights)"));
  const StatedDefault mfu_default = default_mfu(job);
  const double mfu = req.mfu.value_or(mfu_default.value);

  // GPU models present in the offers, in catalog order.
  std::vector<const catalog::GpuSpec*> gpus;
  std::set<std::string> seen;
  for (const auto& o : offers) {
    if (req.gpu && o.gpu.id != *req.gpu) continue;
    if (seen.insert(o.gpu.id).second) gpus.push_back(&o.gpu);
  }
  if (req.gpu && gpus.empty())
    return make_error(ErrorKind::not_found,
                      fmt::format("--gpu {}: no offer in the catalog has this GPU", *req.gpu));

  std::map<std::string, Fit> fit_by_gpu;
  for (const catalog::GpuSpec* g : gpus) {
    const Fit f = fewest_gpus(req, job, usable_bytes(*g));
    fit_by_gpu[g->id] = f;
    GpuVerdict v;
    v.gpu = g->id;
    v.memory_bytes = usable_bytes(*g);
    v.fits = f.fits;
    v.parallel = f.par;
    v.memory = f.mem;
    v.headroom_bytes = v.memory_bytes - f.mem.total_bytes;
    out.verdicts.push_back(v);
    if (job.tokens && !peak_tflops(*g, job.precision))
      out.notes.push_back(
          fmt::format("{}: no dense {} TFLOPS figure in the catalog; its offers are not timed", g->id,
                      precision_name(job.precision)));
  }

  // Per provider, region and GPU: the instance with the fewest GPUs that holds the configuration, or the
  // largest one several times.
  std::map<std::string, const OfferContext*> chosen;
  std::size_t fractional = 0, unpriced = 0;
  for (const auto& o : offers) {
    auto it = fit_by_gpu.find(o.gpu.id);
    if (it == fit_by_gpu.end()) continue;
    if (o.offer.gpu_count < 1 || o.offer.gpu_count != std::floor(o.offer.gpu_count)) {
      ++fractional;
      continue;
    }
    if (!(req.spot ? o.offer.spot_usd_per_hour : o.offer.ondemand_usd_per_hour)) {
      ++unpriced;
      continue;
    }
    const int need = it->second.par.gpus();
    const std::string key = o.offer.provider + "|" + o.offer.region + "|" + o.gpu.id;
    auto& slot = chosen[key];
    if (!slot) {
      slot = &o;
      continue;
    }
    const double cur = slot->offer.gpu_count, cand = o.offer.gpu_count;
    const bool cur_ok = cur >= need, cand_ok = cand >= need;
    if ((cand_ok && !cur_ok) || (cand_ok && cur_ok && cand < cur) || (!cand_ok && !cur_ok && cand > cur))
      slot = &o;
  }
  if (fractional > 0)
    out.notes.push_back(fmt::format("{} offers with a fraction of a GPU were left out", fractional));
  if (unpriced > 0)
    out.notes.push_back(fmt::format("{} offers without a{} price were left out", unpriced,
                                    req.spot ? " spot" : "n on-demand"));

  const std::optional<double> rate_override = req.interruptions_per_hour;
  for (const auto& [key, ctx] : chosen) {
    const Fit& fit = fit_by_gpu[ctx->gpu.id];
    if (job.tokens && !peak_tflops(ctx->gpu, job.precision)) continue;
    PlanOption opt;
    opt.provider = ctx->offer.provider;
    opt.region = ctx->offer.region;
    opt.instance = ctx->offer.instance;
    opt.gpu = ctx->gpu.id;
    opt.gpus_per_instance = ctx->offer.gpu_count;
    const int per_instance = static_cast<int>(ctx->offer.gpu_count);
    const int need = fit.par.gpus();
    opt.instances = (need + per_instance - 1) / per_instance;
    opt.flags = ctx->offer.flags;
    opt.gpu_memory_bytes = usable_bytes(ctx->gpu);
    // Use every GPU paid for (more data parallelism / replicas) unless the user fixed the count.
    opt.parallel = fit.par;
    opt.memory = fit.mem;
    const int paid = opt.instances * per_instance;
    if (!req.gpus && !req.dp && paid > need) {
      // More data parallelism: DDP's gradient buckets come with it, so the ZeRO stage is chosen again.
      std::tie(opt.parallel, opt.memory) =
          config_for(req, job, paid, fit.par.tp, fit.par.pp, opt.gpu_memory_bytes);
    }
    opt.headroom_bytes = opt.gpu_memory_bytes - opt.memory.total_bytes;
    opt.fits = fit.fits && opt.headroom_bytes >= 0;
    opt.spot = req.spot;
    const double usd_per_instance_hour =
        *(req.spot ? ctx->offer.spot_usd_per_hour : ctx->offer.ondemand_usd_per_hour);
    opt.usd_per_hour = meter::usd_per_hour_of_instances(usd_per_instance_hour, opt.instances);
    if (out.compute) time_option(req, job, *out.compute, *ctx, mfu, paid, opt);
    out.options.push_back(std::move(opt));
  }

  score_options(out.options, req.weights);
  const Objective objective = req.objective;
  // Without tokens there is no time or cost: options are ranked by price per hour.
  const auto cost_key = [](const PlanOption& o) { return o.cost_usd.value_or(o.usd_per_hour); };
  const auto time_key = [](const PlanOption& o) { return o.time_h.value_or(0.0); };
  std::stable_sort(out.options.begin(), out.options.end(), [&](const PlanOption& a, const PlanOption& b) {
    if (a.fits != b.fits) return a.fits;
    if (a.flags.empty() != b.flags.empty()) return a.flags.empty();
    if (objective == Objective::time && time_key(a) != time_key(b)) return time_key(a) < time_key(b);
    if (objective == Objective::score && a.score.total != b.score.total) return a.score.total > b.score.total;
    if (cost_key(a) != cost_key(b)) return cost_key(a) < cost_key(b);
    return time_key(a) < time_key(b);
  });

  if (!out.options.empty()) {
    out.parallel = out.options.front().parallel;
    out.memory = out.options.front().memory;
  } else if (!out.verdicts.empty()) {
    out.parallel = out.verdicts.front().parallel;
    out.memory = out.verdicts.front().memory;
  } else {
    Parallelism par;
    par.tp = req.tp.value_or(1);
    par.pp = req.pp.value_or(1);
    par.sp = par.tp > 1;
    par.dp = req.dp.value_or(1);
    par.zero = req.fsdp ? 3 : req.zero.value_or(0);
    out.parallel = par;
    out.memory = estimate_memory(job, par);
  }

  auto add = [&out](std::string key, std::string value, std::string source) {
    out.assumptions.push_back({std::move(key), std::move(value), std::move(source)});
  };
  add("mfu", fmt::format("{:.2f}", mfu), req.mfu ? "--mfu" : mfu_default.reason);
  add("overhead_fixed_bytes", fmt::format("{:.0f}", job.overhead_fixed_bytes),
      "CUDA context and cuBLAS/NCCL workspaces: 1 GiB per GPU (gpumeter default)");
  add("fragmentation", fmt::format("{:.2f}", job.fragmentation),
      "caching-allocator fragmentation: 10 % of the peak (gpumeter default)");
  add("activation_bytes", job.precision == Precision::fp32 ? "4" : "2",
      std::string("tensors a PyTorch 2 layer keeps (") +
          (job.model.gated_mlp ? "Llama-style: fp32 RMSNorm and softmax, SwiGLU"
                               : "GPT-style: LayerNorm, GELU, 1-byte dropout masks") +
          (job.precision == Precision::mixed
               ? "; autocast: fp32 residual stream, a bf16 input copy per linear"
               : "") +
          "), fp32 log-softmax of the logits; measured on an H200 in docs/accuracy.md");
  if (is_training(job))
    add("attention", std::string(attention_name(job.attention)),
        job.attention == Attention::eager
            ? "keeps the softmax of the scores for backward (--attention)"
            : "PyTorch 2 / transformers default: no score matrix kept (--attention)");
  if (is_training(job))
    add("peak", out.memory.peak.phase,
        "the largest phase of a step: forward, loss backward, backward end, optimizer step (docs/plan.md)");
  add("sequence_parallel", out.parallel.tp > 1 ? "on" : "off",
      "on whenever tensor parallel > 1 (Megatron-LM)");
  if (is_training(job))
    add("pipeline_schedule", "1F1B", "first stage holds pp micro-batches: activations of L layers");
  if (job.task == Task::inference) {
    add("prompt_tokens", fmt::format("{}", job.prompt_tokens), "--prompt-tokens or half of --seq");
    add("bandwidth_efficiency", fmt::format("{:.2f}", req.bandwidth_efficiency),
        "decode reads weights + KV cache each step at this fraction of peak bandwidth (gpumeter default)");
  }
  if (uses_adapters(job))
    add("lora_targets", "q,k,v,o and every MLP projection; adapters in fp32",
        "QLoRA (Dettmers et al. 2023): adapters on all linear layers; PEFT autocasts adapters to fp32");
  if (req.spot) {
    add("restart_s", fmt::format("{:.0f}", req.restart_s),
        "new capacity + loading the checkpoint (gpumeter default)");
    if (req.checkpoint_s)
      add("checkpoint_s", fmt::format("{:.0f}", *req.checkpoint_s), "--checkpoint-s");
    else
      add("checkpoint_write_bytes_per_s", fmt::format("{:.0f}", req.checkpoint_write_bytes_per_s),
          "per instance, to local NVMe or object storage (gpumeter default)");
    if (rate_override)
      add("interruptions_per_instance_hour", fmt::format("{}", *rate_override), "--interruption-rate");
    else {
      std::set<std::string> providers;
      for (const auto& o : out.options) providers.insert(o.provider);
      for (const auto& p : providers) {
        const StatedDefault d = default_interruption_rate(p);
        add("interruptions_per_instance_hour." + p, fmt::format("{}", d.value), d.reason);
      }
    }
  }
  add("energy", "GPUs at TDP × time × PUE (host excluded)",
      "upper bound for the GPUs; catalog PUE per provider");
  if (!job.tokens)
    out.notes.push_back(
        "no --tokens: memory and fit only; time, cost, $/1M tokens, energy and carbon need --tokens "
        "(training tokens, or generated tokens for inference); options are ranked by price per hour");
  if (!out.memory.activations_known)
    out.notes.push_back(
        "activations not estimated: the model's shape is unknown (give --layers/--hidden/--heads)");
  return out;
}

}  // namespace gm::plan
