// FLOPs of a job (training 6·N·D + attention, inference 2·N per token), default MFU, time on a GPU.
#include <algorithm>
#include <cmath>

#include "plan/plan.h"

namespace gm::plan {

double dense_training_flops(double params, double tokens) {
  return 6.0 * params * tokens;
}

ComputeEstimate estimate_compute(const JobSpec& job) {
  ComputeEstimate c;
  const ModelSpec& m = job.model;
  const double n = m.active_params > 0 ? m.active_params : m.params;
  const double d = job.tokens.value_or(0.0);
  if (m.arch == Arch::cnn) {
    // D counts samples; backward ≈ 2 × forward.
    const double fwd = m.fwd_flops_per_sample * d;
    if (job.task == Task::inference) {
      c.model_flops = c.hardware_flops = c.prefill_flops = fwd;
      c.requests = d;
    } else {
      c.model_flops = 3.0 * fwd;
      c.hardware_flops = c.model_flops + (job.recompute == Recompute::full ? fwd : 0.0);
    }
    return c;
  }
  const bool shaped = m.has_transformer_shape();
  if (job.task == Task::inference) {
    if (m.arch == Arch::decoder) {
      const double out_len = std::max(job.seq - job.prompt_tokens, 1);
      c.requests = d / out_len;
      c.prefill_flops = 2.0 * n * job.prompt_tokens * c.requests;
      c.decode_flops = 2.0 * n * d;
    } else {
      // Encoders and ViTs process the whole input once: every token is "prefill".
      c.requests = job.seq > 0 ? d / job.seq : 0;
      c.prefill_flops = 2.0 * n * d;
    }
    c.model_flops = c.hardware_flops = c.prefill_flops + c.decode_flops;
    return c;
  }
  // PaLM (Chowdhery et al. 2022) Appendix B: 6N + 12·L·H·Q·T FLOPs per token, H·Q = heads × head size
  // (the hidden size unless the model sets head_dim; MLA: the mean of the q/k and v head sizes).
  c.attention_flops = shaped ? (training_flops_per_token(m, job.seq) - 6.0 * n) * d : 0.0;
  if (uses_adapters(job)) {
    // Frozen base: forward 2N and input gradients 2N, no weight gradients; the adapters train fully.
    c.model_flops = 4.0 * n * d + 6.0 * lora_params(m, job.lora_rank) * d + c.attention_flops;
  } else {
    c.model_flops = dense_training_flops(n, d) + c.attention_flops;
  }
  c.hardware_flops = c.model_flops;
  if (job.recompute == Recompute::full) c.hardware_flops += 2.0 * n * d + c.attention_flops / 3.0;
  if (job.recompute == Recompute::selective) c.hardware_flops += c.attention_flops / 3.0;
  return c;
}

StatedDefault default_mfu(const JobSpec& job) {
  const double n = job.model.params;
  switch (job.task) {
    case Task::inference:
      return {
          0.50,
          "prefill of inference: large matrix products; gpumeter default 50 % (decode is bandwidth-bound)"};
    case Task::lora:
      return {
          0.30,
          "LoRA/QLoRA: frozen (possibly dequantized) base, small adapter products; gpumeter default 30 %"};
    case Task::train:
    case Task::finetune:
      break;
  }
  if (job.model.arch == Arch::cnn || n < 1e9)
    return {0.30, "models under 1B parameters keep kernels too small to fill the GPU; gpumeter default 30 %"};
  if (n >= 100e9)
    return {0.38,
            "100B+ parameters: Llama 3 405B reached 38-43 % BF16 MFU on H100 (Dubey et al. 2024, Table 4)"};
  return {0.40,
          "1B-100B parameters: 40 %, below PaLM's 46.2 % (Chowdhery et al. 2022, Table 3) and typical "
          "Megatron/FSDP reports of 40-55 %"};
}

std::optional<double> peak_tflops(const catalog::GpuSpec& gpu, Precision precision) {
  switch (precision) {
    case Precision::mixed:
    case Precision::bf16:
      if (gpu.bf16_dense_tflops) return gpu.bf16_dense_tflops;
      return gpu.fp16_dense_tflops;  // pre-Ampere GPUs run mixed precision in fp16
    case Precision::fp16:
      return gpu.fp16_dense_tflops;
    case Precision::fp32:
      return gpu.fp32_tflops;
  }
  return std::nullopt;
}

double compute_time_s(double flops, int gpus, double peak, double mfu) {
  return flops / (static_cast<double>(gpus) * peak * 1e12 * mfu);
}

TimeEstimate estimate_time(const JobSpec& job, const ComputeEstimate& c, const MemoryBreakdown& mem,
                           const Parallelism& par, const catalog::GpuSpec& gpu, double mfu, double bw_eff) {
  TimeEstimate t;
  const double peak = peak_tflops(gpu, job.precision).value_or(0);
  const int n = par.gpus();
  if (job.task != Task::inference) {
    t.time_s = compute_time_s(c.model_flops, n, peak, mfu);
    t.bound = "compute";
    return t;
  }
  t.prefill_s = compute_time_s(c.prefill_flops, n, peak, mfu);
  t.bound = "compute";
  if (c.decode_flops > 0) {
    const ModelSpec& m = job.model;
    const double out_len = std::max(job.seq - job.prompt_tokens, 1);
    const double per_replica = static_cast<double>(par.tp) * par.pp;
    const double batches = std::ceil(c.requests / (static_cast<double>(par.dp) * job.batch));
    const double steps = batches * out_len;
    const double active = m.active_params > 0 ? m.active_params : m.params;
    const double step_compute_s = 2.0 * active * job.batch / per_replica / (peak * 1e12 * mfu);
    double step_s = step_compute_s;
    if (gpu.mem_bw_gbps && *gpu.mem_bw_gbps > 0) {
      // Each step reads this GPU's weights and the KV cache at the average context length.
      const double avg_ctx_fraction = (job.prompt_tokens + out_len / 2.0) / std::max(job.seq, 1);
      const double bytes = mem.weights_bytes + mem.kv_cache_bytes * avg_ctx_fraction;
      const double step_mem_s = bytes / (*gpu.mem_bw_gbps * 1e9 * bw_eff);
      if (step_mem_s > step_compute_s) {
        step_s = step_mem_s;
        t.bound = "memory bandwidth";
      }
    }
    t.decode_s = steps * step_s;
  }
  t.time_s = t.prefill_s + t.decode_s;
  return t;
}

}  // namespace gm::plan
