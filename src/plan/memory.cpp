// Memory per GPU: model states (ZeRO accounting), activations (the tensors eager PyTorch keeps; Korthikanti
// et al. 2022 for a 16-bit GPT layer), KV cache, LoRA / QLoRA, framework overhead.
#include <algorithm>
#include <cmath>

#include "plan/plan.h"

namespace gm::plan {

namespace {

/// QLoRA NF4 with double quantization: 4 bits + 0.127 bits of quantization constants per parameter
/// (Dettmers et al. 2023, section 3).
constexpr double kNf4BytesPerParam = (4.0 + 0.127) / 8.0;

double activation_element_bytes(Precision p) {
  return p == Precision::fp32 ? 4.0 : 2.0;
}

double weight_element_bytes(Precision p) {
  return p == Precision::fp32 ? 4.0 : 2.0;
}

/// fp32 element, and the dropout mask element (a bool).
constexpr double kFp32Bytes = 4.0;
constexpr double kMaskBytes = 1.0;

/// MLP size over hidden size (4 when the shape is unknown).
double ffn_ratio(const ModelSpec& m) {
  return m.hidden > 0 && m.ffn > 0 ? static_cast<double>(m.ffn) / m.hidden : 4.0;
}

/// Bytes per hidden element of one eager normalization layer: LayerNorm keeps its input (and fp32 mean and
/// rstd per token); the RMSNorm of Llama-style models, computed in fp32, keeps the fp32 input, its square
/// (kept by mean() in PyTorch 1.13), the normalized output in the activations' dtype and rstd per token.
double norm_bytes(const ModelSpec& m, double e) {
  const double h = m.hidden > 0 ? m.hidden : 1.0;
  return m.gated_mlp ? 2.0 * kFp32Bytes + e + kFp32Bytes / h : e + 2.0 * kFp32Bytes / h;
}

double training_activation_bytes(const JobSpec& job, const Parallelism& par) {
  const ModelSpec& m = job.model;
  const double e = activation_element_bytes(job.precision);
  const double b = job.batch;
  if (m.arch == Arch::cnn) {
    // Conv outputs and their BatchNorm/ReLU outputs kept for the backward pass.
    return 2.0 * m.activations_per_sample * b * e / par.tp;
  }
  const double s = job.seq, h = m.hidden;
  const LayerActivationTerms terms = eager_layer_terms(m, job.precision);
  const double per_layer = layer_activation_bytes(s, b, h, m.heads, par.tp, par.sp, job.recompute, terms);
  // 1F1B: the first stage holds `pp` micro-batches of its L/pp layers (Korthikanti et al. 2022, 4.2.3).
  const double layers_per_stage = std::ceil(static_cast<double>(m.layers) / par.pp);
  double total = per_layer * layers_per_stage * par.pp;
  if (job.recompute == Recompute::full) {
    // The layer being recomputed holds its full (selective) activations during its backward pass.
    total += layer_activation_bytes(s, b, h, m.heads, par.tp, par.sp, Recompute::selective, terms);
  }
  // Outside the layers: the embedding dropout mask (GPT-style), the final norm and the head's input.
  const double outside = (m.gated_mlp ? 0.0 : kMaskBytes) + norm_bytes(m, e) + e;
  total += outside * s * b * h / (par.sp ? par.tp : 1);
  // The loss's log-softmax of the logits in fp32, split over the vocabulary by tensor parallelism.
  if (m.vocab > 0) total += kFp32Bytes * s * b * m.vocab / par.tp;
  return total;
}

double inference_activation_bytes(const JobSpec& job, const Parallelism& par) {
  const ModelSpec& m = job.model;
  const double bytes = activation_element_bytes(job.precision);
  if (m.arch == Arch::cnn) return m.activations_per_sample * job.batch * bytes;
  // Working tensors of one layer while the prompt is processed; logits of the last position in fp32.
  const double f_total = static_cast<double>(m.ffn) * (m.gated_mlp ? 2.0 : 1.0);
  const double prompt = job.prompt_tokens > 0 ? job.prompt_tokens : job.seq;
  return bytes * job.batch * prompt * (4.0 * m.hidden + 2.0 * f_total) / par.tp + 4.0 * job.batch * m.vocab;
}

}  // namespace

bool uses_adapters(const JobSpec& job) {
  return job.task == Task::lora || job.qlora;
}

StateBytes state_bytes(Precision precision, Optimizer optimizer) {
  StateBytes s;
  switch (precision) {
    case Precision::mixed:
      s.weights = 2;
      s.gradients = 2;
      // fp32 master weights (4) + optimizer states.
      s.optimizer = 4 + (optimizer == Optimizer::adamw ? 8 : optimizer == Optimizer::adam8bit ? 2 : 4);
      break;
    case Precision::fp32:
      s.weights = 4;
      s.gradients = 4;
      s.optimizer = optimizer == Optimizer::adamw ? 8 : optimizer == Optimizer::adam8bit ? 2 : 4;
      break;
    case Precision::bf16:
    case Precision::fp16:
      // Pure 16-bit: PyTorch keeps AdamW/SGD states in the parameters' dtype.
      s.weights = 2;
      s.gradients = 2;
      s.optimizer = optimizer == Optimizer::adamw ? 4 : 2;
      break;
  }
  return s;
}

StateBytes zero_model_states(double params, StateBytes per_param, int stage, int dp) {
  const double d = std::max(dp, 1);
  StateBytes out;
  out.weights = params * per_param.weights / (stage >= 3 ? d : 1.0);
  out.gradients = params * per_param.gradients / (stage >= 2 ? d : 1.0);
  out.optimizer = params * per_param.optimizer / (stage >= 1 ? d : 1.0);
  return out;
}

LayerActivationTerms korthikanti_terms(double mlp_coeff) {
  LayerActivationTerms t;
  t.replicated = 10.0;                // layer-norm inputs, QKV and MLP inputs, dropout masks
  t.split = 15.0 + mlp_coeff - 10.0;  // 34 for a GPT layer: 11 attention + 4 layer norms + 19 MLP
  t.attention = 5.0;                  // attention scores' softmax, dropout mask, dropout output
  t.input = 2.0;
  return t;
}

LayerActivationTerms eager_layer_terms(const ModelSpec& m, Precision precision) {
  const double e = activation_element_bytes(precision);
  const double ratio = ffn_ratio(m);
  LayerActivationTerms t;
  t.input = e;
  if (m.gated_mlp) {
    // Two RMSNorms; inputs of the QKV and MLP projections.
    t.replicated = 2.0 * norm_bytes(m, e) + 2.0 * e;
    // q, k and v repeated to every head (grouped-query attention copies them), attention output;
    // gate, SiLU output, up and their product.
    t.split = 4.0 * e + 4.0 * e * ratio;
    // Softmax in fp32, and its copy in the activations' dtype that multiplies V. No dropout.
    t.attention = kFp32Bytes + (e < kFp32Bytes ? e : 0.0);
  } else {
    // Two LayerNorms; QKV and MLP inputs; two 1-byte dropout masks (attention output, MLP output).
    t.replicated = 2.0 * norm_bytes(m, e) + 2.0 * e + 2.0 * kMaskBytes;
    // q, k, v, attention output; GELU input and output.
    t.split = 4.0 * e + 2.0 * e * ratio;
    // Softmax output, 1-byte dropout mask, dropout output.
    t.attention = 2.0 * e + kMaskBytes;
  }
  return t;
}

double layer_activation_bytes(double s, double b, double h, double a, int tp, bool sp, Recompute recompute,
                              const LayerActivationTerms& terms) {
  const double t = std::max(tp, 1);
  const double sbh = s * b * h;
  if (recompute == Recompute::full) return sp ? terms.input * sbh / t : terms.input * sbh;
  const double q = recompute == Recompute::selective ? 0.0 : terms.attention * a * s / h / t;
  if (t == 1) return sbh * (terms.replicated + terms.split + q);
  if (sp) return sbh * ((terms.replicated + terms.split) / t + q);
  return sbh * (terms.replicated + terms.split / t + q);
}

double activation_bytes_per_layer(double s, double b, double h, double a, int tp, bool sp,
                                  Recompute recompute, double mlp_coeff) {
  return layer_activation_bytes(s, b, h, a, tp, sp, recompute, korthikanti_terms(mlp_coeff));
}

double kv_cache_bytes_per_token(const ModelSpec& m, double bytes_per_element) {
  const int kv = m.kv_heads > 0 ? m.kv_heads : m.heads;
  return 2.0 * m.layers * kv * static_cast<double>(m.head_dim()) * bytes_per_element;
}

double lora_params(const ModelSpec& m, int rank) {
  if (!m.has_transformer_shape() || rank <= 0) return 0;
  const double h = m.hidden, f = m.ffn, r = rank;
  const double kv = (m.kv_heads > 0 ? m.kv_heads : m.heads) * static_cast<double>(m.head_dim());
  const double attn = r * (2 * h) * 2 + r * (h + kv) * 2;  // q, o; k, v
  const double mlp = r * (h + f) * (m.gated_mlp ? 3.0 : 2.0) * (m.experts > 0 ? m.experts : 1);
  return m.layers * (attn + mlp);
}

MemoryBreakdown estimate_memory(const JobSpec& job, const Parallelism& par) {
  MemoryBreakdown mem;
  const ModelSpec& m = job.model;
  const double model_parallel = static_cast<double>(par.tp) * par.pp;
  const double params_here = m.params / model_parallel;
  const bool transformer = m.has_transformer_shape();

  if (job.task == Task::inference) {
    const double wbytes = job.qlora ? kNf4BytesPerParam : weight_element_bytes(job.precision);
    mem.weights_bytes = params_here * wbytes;
    if (transformer && m.arch == Arch::decoder) {
      const int kv = m.kv_heads > 0 ? m.kv_heads : m.heads;
      const double kv_split = std::min(par.tp, kv) * static_cast<double>(par.pp);
      mem.kv_cache_bytes =
          kv_cache_bytes_per_token(
              m, weight_element_bytes(job.precision == Precision::fp32 ? Precision::fp32 : Precision::bf16)) *
          job.seq * job.batch / kv_split;
    }
    mem.activations_known = transformer || m.arch == Arch::cnn;
    if (mem.activations_known) mem.activations_bytes = inference_activation_bytes(job, par);
  } else if (uses_adapters(job)) {
    const double base_bytes = job.qlora ? kNf4BytesPerParam : weight_element_bytes(job.precision);
    const double adapters = lora_params(m, job.lora_rank);
    mem.trainable_params = adapters;
    // Adapters are trained in fp32 (PEFT casts them up by default).
    const StateBytes adapter = zero_model_states(
        adapters / model_parallel, state_bytes(Precision::fp32, job.optimizer), par.zero, par.dp);
    mem.weights_bytes = params_here * base_bytes / (par.zero >= 3 ? par.dp : 1) + adapter.weights;
    mem.gradients_bytes = adapter.gradients;
    mem.optimizer_bytes = adapter.optimizer;
  } else {
    mem.trainable_params = m.params;
    const StateBytes st =
        zero_model_states(params_here, state_bytes(job.precision, job.optimizer), par.zero, par.dp);
    mem.weights_bytes = st.weights;
    mem.gradients_bytes = st.gradients;
    mem.optimizer_bytes = st.optimizer;
  }
  if (job.task != Task::inference) {
    mem.activations_known = transformer || m.arch == Arch::cnn;
    if (mem.activations_known) mem.activations_bytes = training_activation_bytes(job, par);
  }
  const double rest = mem.weights_bytes + mem.gradients_bytes + mem.optimizer_bytes + mem.activations_bytes +
                      mem.kv_cache_bytes;
  mem.overhead_bytes = job.overhead_fixed_bytes + job.fragmentation * rest;
  mem.total_bytes = rest + mem.overhead_bytes;
  return mem;
}

}  // namespace gm::plan
