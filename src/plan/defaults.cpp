// The defaults of a plan's job settings: how resolve_job_defaults fills what the user left out, the
// assumptions that state them, and the same rules in words for `plan --help`.
#include <fmt/format.h>

#include <algorithm>

#include "plan/plan.h"

namespace gm::plan {

JobSpec resolve_job_defaults(const JobSpec& in, bool seq_given, bool precision_given, bool recompute_given) {
  JobSpec job = in;
  const bool inference = job.task == Task::inference;
  if (!seq_given) {
    const int native = job.model.seq > 0 ? job.model.seq : kDefaultSeqCapTraining;
    job.seq = std::min(native, inference ? kDefaultSeqCapInference : kDefaultSeqCapTraining);
  }
  if (inference && job.prompt_tokens <= 0 && job.model.arch == Arch::decoder) job.prompt_tokens = job.seq / 2;
  if (!precision_given)
    job.precision = (inference || job.task == Task::lora) ? Precision::bf16 : Precision::mixed;
  if (!recompute_given)
    job.recompute =
        (job.task == Task::finetune || job.task == Task::lora) ? Recompute::full : Recompute::selective;
  return job;
}

void add_default_assumptions(PlanResult& r, const GivenSettings& given) {
  const JobSpec& j = r.job;
  const bool inference = j.task == Task::inference;
  std::vector<Assumption> add;
  if (!given.seq)
    add.push_back({"seq", std::to_string(j.seq),
                   fmt::format("the model's native length capped at {} (--seq)",
                               inference ? kDefaultSeqCapInference : kDefaultSeqCapTraining)});
  if (!given.batch) add.push_back({"batch", std::to_string(j.batch), "one sequence per GPU (--batch)"});
  if (!given.precision)
    add.push_back({"precision", std::string(precision_name(j.precision)),
                   "mixed for training; bf16 for LoRA and inference (--precision)"});
  if (!inference && !given.optimizer)
    add.push_back({"optimizer", std::string(optimizer_name(j.optimizer)), "gpumeter default (--optimizer)"});
  if (!inference && !given.recompute)
    add.push_back({"recompute", std::string(recompute_name(j.recompute)),
                   "full for fine-tuning (what Hugging Face gradient checkpointing does), selective for "
                   "pre-training (Megatron-LM) (--recompute)"});
  if (uses_adapters(j) && !given.lora_rank)
    add.push_back({"lora_rank", std::to_string(j.lora_rank), "gpumeter default (--lora-rank)"});
  if (!given.zero && !given.fsdp && !inference)
    add.push_back({"zero", std::to_string(r.parallel.zero),
                   "lowest ZeRO stage that fits; value of the first option (--zero)"});
  if (!given.gpus && !given.dp)
    add.push_back(
        {"gpus", "per GPU model", "the fewest that fit; every GPU of a rented instance is used (--gpus)"});
  r.assumptions.insert(r.assumptions.begin(), add.begin(), add.end());
}

std::string default_rule(std::string_view setting) {
  const PlanRequest request;
  if (setting == "task") return std::string(task_name(JobSpec{}.task));
  if (setting == "prompt-tokens") return "half of --seq";
  if (setting == "precision") return "mixed; bf16 for lora/inference";
  if (setting == "optimizer") return std::string(optimizer_name(JobSpec{}.optimizer));
  if (setting == "zero") return "lowest stage that fits";
  if (setting == "lora-rank") return std::to_string(JobSpec{}.lora_rank);
  if (setting == "gpus") return "the fewest that fit, every GPU of the instance used";
  if (setting == "mfu") return "by task and scale";
  if (setting == "interruption-rate") return "per provider";
  if (setting == "checkpoint-s")
    return fmt::format("size / {:g} GB/s", request.checkpoint_write_bytes_per_s / 1e9);
  if (setting == "restart-s") return fmt::format("{:g}", request.restart_s);
  if (setting == "optimize")
    return request.objective == Objective::cost ? "cost; score with --weights" : "score with --weights";
  if (setting == "pue") return fmt::format("{:g}", TcoInput{}.pue);
  if (setting == "gpu-power-w") return "the GPU's TDP";
  return "";
}

}  // namespace gm::plan
