// Activations: the tensors a PyTorch transformer layer keeps for its backward pass, by how the layer is
// written (norm, softmax precision, fused projections, MLP activation, dropout), the precision (autocast:
// fp32 residual stream, bf16 copies of each linear's input) and the attention implementation.
#include <algorithm>
#include <cmath>

#include "plan/memory_detail.h"
#include "plan/plan.h"

namespace gm::plan {

namespace {

/// The dropout mask element (a bool).
constexpr double kMaskBytes = 1.0;

bool is_gemma(std::string_view family) {
  return family == "gemma2" || family == "gemma3" || family == "gemma3_text";
}

/// Bytes one norm keeps per token over `width` elements of input dtype `r`: LayerNorm its input and fp32
/// mean and rstd; an fp32 RMSNorm the fp32 input (or its fp32 copy), the normalized tensor cast back to the
/// input dtype and rstd; a plain RMSNorm its input, weight · input and rstd.
double norm_token_bytes(NormKind kind, double r, double e, bool mixed, double width) {
  switch (kind) {
    case NormKind::layernorm:
      return r * width + 2.0 * kFp32Bytes;
    case NormKind::rmsnorm_fp32:
      return kFp32Bytes * width + r * width + kFp32Bytes;
    case NormKind::rmsnorm:
      return 2.0 * r * width + (mixed ? kFp32Bytes : e);
  }
  return r * width;
}

/// The inputs the linear layers after a norm keep: under autocast each linear casts the fp32 norm output
/// to bf16 itself (one copy per linear); otherwise they share the norm's output.
double linear_inputs(double width, int linears, Precision p) {
  return p == Precision::mixed ? 2.0 * linears * width : activation_bytes(p) * width;
}

struct TokenBytes {
  double replicated = 0;  ///< per token, not split by tensor parallelism
  double split = 0;       ///< per token, split by tensor parallelism
};

/// One layer with a dense MLP of inner size `ffn` (moe: the routed experts of inner size `ffn`).
TokenBytes layer_token_bytes(const ModelSpec& m, Precision p, Attention attention, double ffn, bool moe) {
  const Implementation& im = m.impl;
  const double e = activation_bytes(p), r = residual_bytes(p);
  const bool mixed = p == Precision::mixed;
  const double h = m.hidden, a = m.heads, kv = m.kv_heads > 0 ? m.kv_heads : m.heads;
  const double hd = m.head_dim(), vhd = m.value_head_dim();
  const double qd = a * hd, vd = a * vhd;
  // MLA decompresses keys and values per head; grouped-query attention keeps kv heads.
  const double kvd = m.mla() ? a * hd : kv * hd, kvd_v = m.mla() ? a * vhd : kv * vhd;
  TokenBytes t;
  // Pre-attention and pre-MLP norms on the residual stream; Gemma's post norms on the branch outputs.
  t.replicated += 2.0 * norm_token_bytes(im.norm, r, e, mixed, h);
  t.replicated += std::max(im.norms_per_layer - 2, 0) * norm_token_bytes(im.norm, e, e, mixed, h);
  const int attention_linears = m.mla() ? 2 : im.fused_qkv ? 1 : 3;
  const int mlp_linears = moe ? 1 : m.gated_mlp && !im.fused_gate_up ? 2 : 1;
  t.replicated += linear_inputs(h, attention_linears, p) + linear_inputs(h, mlp_linears, p);
  if (im.hidden_dropout > 0) t.replicated += 2.0 * kMaskBytes * h;
  if (m.mla()) {
    // Compressed query and key/value: each normalized (fp32 RMSNorm) and fed to its up-projection.
    for (double rank : {static_cast<double>(m.q_lora_rank), static_cast<double>(m.kv_lora_rank)})
      if (rank > 0) t.split += norm_token_bytes(NormKind::rmsnorm_fp32, e, e, mixed, rank) + e * rank;
  }
  if (m.qk_norm) t.split += (kFp32Bytes + e) * (qd + kvd);
  if (attention == Attention::eager) {
    // q, k and v repeated to every head (grouped-query attention copies them), the output made contiguous.
    t.split += e * (2.0 * qd + 2.0 * vd);
  } else {
    // q, k, v, the output and the fp32 log-sum-exp per head.
    t.split += e * (qd + kvd + kvd_v + vd) + kFp32Bytes * a;
  }
  auto mlp_bytes = [&](double f) {
    switch (m.gated_mlp ? MlpActivation::gated : im.mlp) {
      case MlpActivation::gated:
        return 4.0 * e * f;  // gate, activation, up, product
      case MlpActivation::gelu:
        return 2.0 * e * f;  // input and output of one GELU kernel
      case MlpActivation::gelu_python:
        // x (pow's input), tanh(...), 1 + tanh(...), x·0.5, the product. Under autocast pow runs in fp32 (it
        // keeps the fp32 copy of x), tanh and 1 + tanh stay fp32, the product is cast to bf16 for the next
        // linear: 4 + 4 + 4 + 2 + 2 bytes.
        return mixed ? 16.0 * f : 5.0 * e * f;
    }
    return 2.0 * e * f;
  };
  if (moe) {
    // Each routed expert gathers the token, runs its MLP and scales its output; shared experts see every
    // token; the router's fp32 logits and probabilities.
    t.split += m.experts_per_token * (mlp_bytes(ffn) + 2.0 * e * h) + 2.0 * kFp32Bytes * m.experts;
    if (m.shared_ffn > 0) t.split += mlp_bytes(m.shared_ffn);
  } else {
    t.split += mlp_bytes(ffn);
  }
  return t;
}

}  // namespace

double activation_bytes(Precision p) {
  return p == Precision::fp32 ? 4.0 : 2.0;
}

double residual_bytes(Precision p) {
  // Under autocast the embeddings are fp32 and every residual add promotes to fp32.
  return p == Precision::fp32 || p == Precision::mixed ? 4.0 : 2.0;
}

Implementation family_implementation(std::string_view family, bool gated) {
  Implementation im;
  if (family == "gpt2" || (family.empty() && !gated)) {
    im.norm = NormKind::layernorm;
    im.softmax_fp32 = false;
    im.fused_qkv = true;
    // Hugging Face GPT-2's gelu_new is Python operations; other GPT-style layers run one GELU kernel.
    im.mlp = family == "gpt2" ? MlpActivation::gelu_python : MlpActivation::gelu;
    im.attention_dropout = im.hidden_dropout = im.embedding_dropout = 0.1;
    return im;
  }
  im.mlp = gated ? MlpActivation::gated : MlpActivation::gelu;
  if (family == "phi3") im.fused_qkv = im.fused_gate_up = true;
  if (is_gemma(family)) im.norms_per_layer = 4;
  return im;
}

LayerActivationTerms korthikanti_terms(double mlp_coeff) {
  LayerActivationTerms t;
  t.replicated = 10.0;                // layer-norm inputs, QKV and MLP inputs, dropout masks
  t.split = 15.0 + mlp_coeff - 10.0;  // 34 for a GPT layer: 11 attention + 4 layer norms + 19 MLP
  t.attention = 5.0;                  // attention scores' softmax, dropout mask, dropout output
  t.input = 2.0;
  return t;
}

LayerActivationTerms layer_terms(const ModelSpec& m, Precision p, Attention attention) {
  const double e = activation_bytes(p);
  const double h = m.hidden > 0 ? m.hidden : 1.0;
  TokenBytes t;
  if (m.experts > 0) {
    const double layers = std::max(m.layers, 1);
    const double dense = std::min<double>(m.dense_layers, layers);
    const TokenBytes d = layer_token_bytes(m, p, attention, m.dense_ffn > 0 ? m.dense_ffn : m.ffn, false);
    const TokenBytes s = layer_token_bytes(m, p, attention, m.ffn, true);
    t.replicated = (dense * d.replicated + (layers - dense) * s.replicated) / layers;
    t.split = (dense * d.split + (layers - dense) * s.split) / layers;
  } else {
    t = layer_token_bytes(m, p, attention, m.ffn > 0 ? m.ffn : 4.0 * h, false);
  }
  LayerActivationTerms out;
  out.replicated = t.replicated / h;
  out.split = t.split / h;
  out.input = residual_bytes(p);
  out.attention = 0;
  if (attention == Attention::eager) {
    // Per score element: the softmax output (fp32 when the layer asks for it, or under autocast), the
    // dropout mask, and the copy in the activations' dtype that multiplies V (a new tensor when the softmax
    // was fp32 or dropout ran).
    const Implementation& im = m.impl;
    const double sm = im.softmax_fp32 || p == Precision::mixed ? kFp32Bytes : e;
    const bool dropout = im.attention_dropout > 0;
    out.attention = sm + (dropout ? kMaskBytes : 0.0) + (sm != e || dropout ? e : 0.0);
  }
  return out;
}

LayerActivationTerms eager_layer_terms(const ModelSpec& m, Precision precision) {
  return layer_terms(m, precision, Attention::eager);
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

double outside_layers_token_bytes(const ModelSpec& m, Precision p) {
  const double h = m.hidden, e = activation_bytes(p), r = residual_bytes(p);
  double bytes = m.impl.embedding_dropout > 0 ? kMaskBytes * h : 0.0;
  bytes += norm_token_bytes(m.impl.norm, r, e, p == Precision::mixed, h);  // final norm
  bytes += linear_inputs(h, 1, p);                                         // the head's input
  return bytes;
}

}  // namespace gm::plan
