// Memory per GPU: model states (ZeRO accounting; PyTorch autocast's without ZeRO), activations
// (activations.cpp), KV cache, LoRA / QLoRA, the training peak over the phases of a step, framework overhead.
#include <algorithm>
#include <cmath>

#include "plan/memory_detail.h"
#include "plan/plan.h"

namespace gm::plan {

namespace {

/// QLoRA NF4 with double quantization: 4 bits + 0.127 bits of quantization constants per parameter
/// (Dettmers et al. 2023, section 3).
constexpr double kNf4BytesPerParam = (4.0 + 0.127) / 8.0;

double weight_element_bytes(Precision p) {
  return p == Precision::fp32 ? 4.0 : 2.0;
}

double training_activation_bytes(const JobSpec& job, const Parallelism& par) {
  const ModelSpec& m = job.model;
  const double e = activation_bytes(job.precision);
  const double b = job.batch;
  if (m.arch == Arch::cnn) {
    // Conv outputs and their BatchNorm/ReLU outputs kept for the backward pass.
    return 2.0 * m.activations_per_sample * b * e / par.tp;
  }
  const double s = job.seq, h = m.hidden;
  const LayerActivationTerms terms = layer_terms(m, job.precision, job.attention);
  const double per_layer = layer_activation_bytes(s, b, h, m.heads, par.tp, par.sp, job.recompute, terms);
  // 1F1B: the first stage holds `pp` micro-batches of its L/pp layers (Korthikanti et al. 2022, 4.2.3).
  const double layers_per_stage = std::ceil(static_cast<double>(m.layers) / par.pp);
  double total = per_layer * layers_per_stage * par.pp;
  if (job.recompute == Recompute::full) {
    // The layer being recomputed holds its full (selective) activations during its backward pass.
    total += layer_activation_bytes(s, b, h, m.heads, par.tp, par.sp, Recompute::selective, terms);
  }
  // Outside the layers: the embedding dropout mask, the final norm and the head's input.
  total += outside_layers_token_bytes(m, job.precision) * s * b / (par.sp ? par.tp : 1);
  // The loss's log-softmax of the logits in fp32, split over the vocabulary by tensor parallelism.
  if (m.vocab > 0) total += kFp32Bytes * s * b * m.vocab / par.tp;
  return total;
}

double inference_activation_bytes(const JobSpec& job, const Parallelism& par) {
  const ModelSpec& m = job.model;
  const double bytes = activation_bytes(job.precision);
  if (m.arch == Arch::cnn) return m.activations_per_sample * job.batch * bytes;
  // Working tensors of one layer while the prompt is processed; logits of the last position in fp32.
  const double f_total = static_cast<double>(m.ffn) * (m.gated_mlp ? 2.0 : 1.0);
  const double prompt = job.prompt_tokens > 0 ? job.prompt_tokens : job.seq;
  return bytes * job.batch * prompt * (4.0 * m.hidden + 2.0 * f_total) / par.tp + 4.0 * job.batch * m.vocab;
}

/// Parameters autocast casts to bf16 (the weights of linear layers and the tied head; not the input
/// embedding of an untied model, which is looked up, not multiplied).
double autocast_cast_params(const ModelSpec& m) {
  const double embedding = m.tied_embeddings ? 0.0 : static_cast<double>(m.vocab) * m.hidden;
  return std::max(m.params - embedding, 0.0);
}

/// The training peak: the largest of the phases of a step, each with the tensors live then.
PeakDetail training_peak(const JobSpec& job, const Parallelism& par, const MemoryBreakdown& mem) {
  const ModelSpec& m = job.model;
  const double e = activation_bytes(job.precision);
  const double logits =
      m.vocab > 0 && m.arch != Arch::cnn ? static_cast<double>(job.seq) * job.batch * m.vocab / par.tp : 0.0;
  // DDP (no ZeRO) keeps flat gradient buckets as large as the gradients from its construction on.
  const double buckets = par.dp > 1 && par.zero == 0 ? mem.gradients_bytes : 0.0;
  // torch.optim.AdamW (foreach, PyTorch's default on CUDA) makes one temporary of the states' size.
  double adam_temp = 0;
  if (job.optimizer == Optimizer::adamw) {
    // States in the parameters' dtype: 2 bytes in pure bf16/fp16; LoRA adapters are fp32.
    const bool sixteen = job.precision == Precision::bf16 || job.precision == Precision::fp16;
    const double state_bytes = sixteen && !uses_adapters(job) ? 2.0 : kFp32Bytes;
    const double model_parallel = static_cast<double>(par.tp) * par.pp;
    adam_temp = mem.trainable_params / model_parallel * state_bytes / (par.zero >= 1 ? par.dp : 1);
  }
  std::vector<MemoryTerm> states = {{"weights", mem.weights_bytes},
                                    {"optimizer states", mem.optimizer_bytes}};
  if (mem.weight_copies_bytes > 0) states.push_back({"autocast bf16 weight copies", mem.weight_copies_bytes});
  if (buckets > 0) states.push_back({"DDP gradient buckets", buckets});

  struct Phase {
    std::string name;
    std::vector<MemoryTerm> terms;
  };
  std::vector<Phase> phases;
  {
    Phase f{"forward", states};
    f.terms.push_back({"activations", mem.activations_bytes});
    if (logits > 0) {
      f.terms.push_back({"logits", e * logits});
      if (e < kFp32Bytes) f.terms.push_back({"logits fp32 upcast", kFp32Bytes * logits});
    }
    phases.push_back(std::move(f));
  }
  if (logits > 0) {
    // Backward of the loss: nll_loss's gradient and log-softmax's, beside the saved log-softmax.
    Phase l{"loss backward", states};
    l.terms.push_back({"activations", mem.activations_bytes});
    l.terms.push_back({"nll_loss gradient", kFp32Bytes * logits});
    l.terms.push_back({"log-softmax gradient", kFp32Bytes * logits});
    if (job.keep_logits) l.terms.push_back({"logits (held by the loop)", e * logits});
    phases.push_back(std::move(l));
  }
  {
    Phase b{"backward end", {{"weights", mem.weights_bytes}, {"optimizer states", mem.optimizer_bytes}}};
    b.terms.push_back({"gradients", mem.gradients_bytes});
    if (buckets > 0) b.terms.push_back({"DDP gradient buckets", buckets});
    phases.push_back(b);
    Phase o = b;
    o.name = "optimizer step";
    if (adam_temp > 0) o.terms.push_back({"AdamW temporaries", adam_temp});
    phases.push_back(std::move(o));
  }
  PeakDetail peak;
  for (const auto& ph : phases) {
    double sum = 0;
    for (const auto& t : ph.terms) sum += t.bytes;
    peak.phases.push_back({ph.name, sum});
    if (sum > peak.bytes || peak.phase.empty()) {
      peak.bytes = sum;
      peak.phase = ph.name;
      peak.terms = ph.terms;
    }
  }
  return peak;
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
    if (job.precision == Precision::mixed && par.zero == 0) {
      // PyTorch autocast: fp32 weights and gradients, fp32 optimizer states (no separate master copy);
      // the bf16 copies autocast makes of the weights live from forward to their use in backward.
      mem.weights_bytes = params_here * kFp32Bytes;
      mem.gradients_bytes = params_here * kFp32Bytes;
      mem.optimizer_bytes = st.optimizer - params_here * kFp32Bytes;
      mem.weight_copies_bytes = autocast_cast_params(m) / model_parallel * 2.0;
    }
  }
  if (job.task != Task::inference) {
    mem.activations_known = transformer || m.arch == Arch::cnn;
    if (mem.activations_known) mem.activations_bytes = training_activation_bytes(job, par);
  }
  if (job.task == Task::inference) {
    mem.peak.phase = "inference";
    mem.peak.terms = {{"weights", mem.weights_bytes},
                      {"KV cache", mem.kv_cache_bytes},
                      {"activations", mem.activations_bytes}};
    mem.peak.bytes = mem.weights_bytes + mem.kv_cache_bytes + mem.activations_bytes;
    mem.peak.phases = {{"inference", mem.peak.bytes}};
  } else {
    mem.peak = training_peak(job, par, mem);
  }
  mem.peak_bytes = mem.peak.bytes;
  mem.overhead_bytes = job.overhead_fixed_bytes + job.fragmentation * mem.peak_bytes;
  mem.total_bytes = mem.peak_bytes + mem.overhead_bytes;
  return mem;
}

}  // namespace gm::plan
