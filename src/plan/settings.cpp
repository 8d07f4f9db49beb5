// A job as `plan`'s flags give it (PlanSettings) into the request the planner takes: the model, the task
// and its settings with their defaults, parallelism, spot, ranking; and which settings were given.
#include "plan/plan.h"

namespace gm::plan {

namespace {

Error usage_error(std::string message) {
  return make_error(ErrorKind::usage, std::move(message));
}

Result<ModelSpec> model_from_settings(const PlanSettings& f) {
  if (f.model && f.model_file) return usage_error("give one of --model and --model-file");
  std::optional<ModelSpec> base;
  if (f.model) {
    GM_TRY(base, resolve_model(*f.model, hf_hub_search()));
  } else if (f.model_file) {
    GM_TRY(base, load_model_toml(*f.model_file));
  }
  ModelOverrides o;
  o.layers = f.layers;
  o.hidden = f.hidden;
  o.heads = f.heads;
  o.kv_heads = f.kv_heads;
  o.ffn = f.ffn;
  o.vocab = f.vocab;
  if (f.params) {
    GM_TRY(o.params, parse_count(*f.params, "--params"));
  }
  return build_model(base, o);
}

}  // namespace

Result<PlanRequest> request_from_settings(const PlanSettings& f) {
  PlanRequest req;
  JobSpec& job = req.job;
  GM_TRY(job.model, model_from_settings(f));
  GM_TRY(job.task, parse_task(f.task));
  if (f.qlora && job.task != Task::lora && job.task != Task::finetune)
    return usage_error("--qlora goes with --task lora (or finetune)");
  if (f.qlora) {
    job.task = Task::lora;
    job.qlora = true;
  }
  if (f.lora_rank && job.task != Task::lora)
    return usage_error("--lora-rank goes with --task lora or --qlora");
  if (f.lora_rank) job.lora_rank = *f.lora_rank;
  if (f.tokens) {
    GM_TRY(job.tokens, parse_count(*f.tokens, "--tokens"));
  }
  if (f.precision) {
    GM_TRY(job.precision, parse_precision(*f.precision));
  }
  if (f.optimizer) {
    GM_TRY(job.optimizer, parse_optimizer(*f.optimizer));
  }
  if (f.recompute) {
    GM_TRY(job.recompute, parse_recompute(*f.recompute));
  }
  if (f.attention) {
    GM_TRY(job.attention, parse_attention(*f.attention));
  }
  job.keep_logits = f.keep_logits;
  if (f.seq) job.seq = *f.seq;
  if (f.batch) job.batch = *f.batch;
  if (f.prompt_tokens) {
    if (*f.prompt_tokens <= 0) return usage_error("--prompt-tokens must be a positive number");
    job.prompt_tokens = *f.prompt_tokens;
  }
  job = resolve_job_defaults(job, f.seq.has_value(), f.precision.has_value(), f.recompute.has_value());
  req.dp = f.dp;
  req.tp = f.tp;
  req.pp = f.pp;
  req.zero = f.zero;
  req.fsdp = f.fsdp;
  if (f.fsdp && f.zero && *f.zero != 3)
    return usage_error("--fsdp shards like ZeRO-3; it cannot go with --zero 0, 1 or 2");
  req.gpus = f.gpus;
  req.mfu = f.mfu;
  req.spot = f.spot;
  req.interruptions_per_hour = f.interruption_rate;
  req.checkpoint_s = f.checkpoint_s;
  if (f.restart_s) {
    if (!(*f.restart_s >= 0)) return usage_error("--restart-s must not be negative");
    req.restart_s = *f.restart_s;
  }
  if (f.weights) {
    GM_TRY(req.weights, parse_weights(*f.weights));
    req.objective = Objective::score;
  }
  if (f.optimize) {
    GM_TRY(req.objective, parse_objective(*f.optimize));
  }
  return req;
}

GivenSettings given_settings(const PlanSettings& f) {
  GivenSettings given;
  given.seq = f.seq.has_value();
  given.batch = f.batch.has_value();
  given.precision = f.precision.has_value();
  given.optimizer = f.optimizer.has_value();
  given.recompute = f.recompute.has_value();
  given.lora_rank = f.lora_rank.has_value();
  given.zero = f.zero.has_value();
  given.fsdp = f.fsdp;
  given.gpus = f.gpus.has_value();
  given.dp = f.dp.has_value();
  return given;
}

}  // namespace gm::plan
