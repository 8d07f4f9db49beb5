#pragma once
// Planning a training or inference job before renting: model description, memory per GPU with its
// breakdown, compute and time, ranking of catalog offers (on-demand or spot with checkpointing),
// weighted scoring, and own-hardware TCO. Pure functions over plain structs; formulas and their sources
// are in docs/plan.md.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "catalog/catalog.h"
#include "meter/meter.h"
#include "util/result.h"

namespace gm::plan {

// ---------------------------------------------------------------------------------------------- models

enum class Arch { decoder, encoder, vision_transformer, cnn };

/// How a layer normalizes: LayerNorm; RMSNorm computed in fp32 (every Hugging Face RMSNorm); RMSNorm in the
/// activations' dtype (`w * x * rsqrt(mean(x²))` written in plain PyTorch).
enum class NormKind { layernorm, rmsnorm_fp32, rmsnorm };
/// The MLP's activation: one fused GELU kernel; GELU written as Python operations (Hugging Face GPT-2's
/// `gelu_new`); a gated MLP (SwiGLU / GeGLU: gate, activation, up, product).
enum class MlpActivation { gelu, gelu_python, gated };

/// How a model's layers are written, as far as the tensors they keep for backward differ (docs/accuracy.md).
struct Implementation {
  NormKind norm = NormKind::rmsnorm_fp32;
  int norms_per_layer = 2;     ///< Gemma 2/3: 4 (pre and post norms)
  bool softmax_fp32 = true;    ///< eager attention: softmax in fp32, then cast (Hugging Face Llama family)
  bool fused_qkv = false;      ///< one projection for q, k and v (GPT-2 c_attn, Phi-3 qkv_proj)
  bool fused_gate_up = false;  ///< one projection for gate and up (Phi-3 gate_up_proj)
  MlpActivation mlp = MlpActivation::gated;
  double attention_dropout = 0;  ///< probability on the attention weights
  double hidden_dropout = 0;     ///< probability on both residual branches
  double embedding_dropout = 0;  ///< probability on the embeddings
};

/// The implementation of a model family (a Hugging Face model_type; "" = by `gated`: Llama-style or a
/// GPT-style layer with one fused GELU and dropout 0.1).
Implementation family_implementation(std::string_view family, bool gated);

/// Architecture of a model. Transformer fields are 0 for a CNN and when only --params is known.
struct ModelSpec {
  std::string name;
  Arch arch = Arch::decoder;
  double params = 0;         ///< total parameters
  double active_params = 0;  ///< parameters used per token (MoE: the routed experts only)
  int layers = 0;
  int hidden = 0;
  int heads = 0;
  int kv_heads = 0;  ///< key/value heads (grouped-query attention); = heads for MHA
  int ffn = 0;       ///< MLP inner size (per expert for MoE)
  int vocab = 0;
  int seq = 0;                   ///< default (native) sequence length; 1 sample for a CNN
  bool gated_mlp = false;        ///< SwiGLU-style MLP with three matrices
  bool tied_embeddings = false;  ///< output layer shares the embedding matrix
  bool qkv_bias = false;         ///< biases on the query/key/value projections (Qwen)
  int experts = 0;               ///< MoE experts per layer (0 = dense)
  int experts_per_token = 0;
  double fwd_flops_per_sample = 0;    ///< CNN: forward FLOPs per input sample
  double activations_per_sample = 0;  ///< CNN: activation elements per sample (conv outputs)
  std::string source;
  std::string family;            ///< Hugging Face model_type the layers follow ("" = by gated_mlp)
  int head_size = 0;             ///< per-head size when it is not hidden / heads (Qwen3, Gemma 3); MLA: q/k
  bool qk_norm = false;          ///< RMSNorm on each query and key head (Qwen3, Gemma 3)
  bool o_bias = false;           ///< bias on the output projection (gpt-oss)
  bool attention_sinks = false;  ///< one learned sink logit per head (gpt-oss)
  int shared_ffn = 0;            ///< MoE: inner size of the shared experts together
  int dense_layers = 0;          ///< MoE: leading layers with a dense MLP (DeepSeek first_k_dense_replace)
  int dense_ffn = 0;             ///< MoE: their MLP inner size
  bool moe_biases = false;       ///< MoE: biases on the router and the experts (gpt-oss)
  int q_lora_rank = 0;           ///< MLA (DeepSeek-V3): query compression rank (0 = none)
  int kv_lora_rank = 0;          ///< MLA: key/value compression rank (0 = not MLA)
  int rope_head_dim = 0;         ///< MLA: rotary part of each query/key head
  int v_head_dim = 0;            ///< MLA: value head size
  Implementation impl;           ///< how the layers are written (family_implementation unless given)

  /// True when layers, hidden size and heads are known (transformer formulas apply).
  bool has_transformer_shape() const { return layers > 0 && hidden > 0 && heads > 0; }
  /// Per-head size of queries and keys: head_size, else hidden / heads.
  int head_dim() const { return head_size > 0 ? head_size : heads > 0 ? hidden / heads : 0; }
  /// Per-head size of values (MLA: v_head_dim).
  int value_head_dim() const { return v_head_dim > 0 ? v_head_dim : head_dim(); }
  /// True for multi-head latent attention (DeepSeek-V2/V3).
  bool mla() const { return kv_lora_rank > 0; }
};

/// The built-in model table (data/models.csv compiled into the binary).
const std::vector<ModelSpec>& builtin_models();
/// A built-in model by name or alias (case-insensitive); a usage error naming close names if unknown.
Result<ModelSpec> find_model(std::string_view name);
/// The built-in model a serving engine's model name is (an engine reports the Hugging Face id it loaded):
/// the organisation prefix and an instruction / chat / version suffix ("-Instruct", "-chat-hf", "-it",
/// "-v0.3") are dropped before matching names and aliases; nullopt when none matches (docs/inference.md).
std::optional<ModelSpec> find_served_model(std::string_view served_name);
/// Parses a TOML model description (keys as the models.csv columns); errors name `origin` and the key.
Result<ModelSpec> parse_model_toml(std::string_view text, std::string_view origin);
/// Reads and parses a TOML model file.
Result<ModelSpec> load_model_toml(const std::string& path);
/// Parses a Hugging Face config.json (`model_type` gpt2, llama, mistral, qwen2, qwen3, gemma2, gemma3 and its
/// text_config, phi3, mixtral, qwen2_moe, qwen3_moe, deepseek_v3, gpt_oss); unknown fields are ignored, a
/// missing or mistyped one is a usage error naming `origin` and the key. `name` names the model.
Result<ModelSpec> parse_hf_config(std::string_view json_text, std::string_view origin, std::string_view name);
/// Reads a Hugging Face config: a JSON file of any name, or a model folder holding config.json.
Result<ModelSpec> load_hf_config(const std::string& path);
/// Where Hub ids are looked up: Hugging Face hub cache folders (holding models--org--name/snapshots/*/).
struct ModelSearch {
  std::vector<std::string> hub_caches;  ///< $HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub
};
/// The model `name_or_path` names: a built-in model or alias; a Hugging Face config file or model folder;
/// a TOML model file (*.toml); a Hub id (org/name) found in one of `search`'s caches. A usage error saying
/// what was tried otherwise. The library function behind `--model NAME|PATH`.
Result<ModelSpec> resolve_model(std::string_view name_or_path, const ModelSearch& search);
/// Training FLOPs per token of a sequence of `seq` tokens: 6·N (active) + the attention term
/// 6·L·heads·(qk + v head sizes)·seq (= PaLM's 12·L·H·Q·T for equal sizes); what `plan` counts per token.
double training_flops_per_token(const ModelSpec& model, int seq);
/// Parameter count of a decoder from its shape (Llama-style RMSNorm when gated, GPT-2-style otherwise).
double params_from_shape(const ModelSpec& model);
/// Parameters used per token of an MoE model from its shape (= params for a dense model).
double active_params_from_shape(const ModelSpec& model);
/// Checks sizes are positive and consistent (heads divide hidden, kv heads divide heads...).
Result<void> validate_model(const ModelSpec& model);

/// Fields of a model given explicitly (the command line's --layers ... --params); unset = not given.
struct ModelOverrides {
  std::optional<int> layers, hidden, heads, kv_heads, ffn, vocab;
  std::optional<double> params;  ///< total parameters (also the active count of a dense model)
  /// True when any shape field is given.
  bool has_shape() const { return layers || hidden || heads || kv_heads || ffn || vocab; }
};
/// The model to plan: `base` (a built-in or file model; none: a custom Llama-style decoder, with
/// kv_heads = heads and ffn = 4·hidden unless given) with `overrides` applied. A changed shape is
/// validated (usage errors name the flag) and its parameters recounted; `params` overrides the count.
Result<ModelSpec> build_model(const std::optional<ModelSpec>& base, const ModelOverrides& overrides);

// ---------------------------------------------------------------------------------------------- job

enum class Task { train, finetune, lora, inference };
enum class Precision { fp32, bf16, fp16, mixed };
enum class Optimizer { adamw, adam8bit, sgd };
enum class Recompute { none, selective, full };
/// Attention implementation: eager keeps the score matrix (softmax output) for backward; SDPA and flash
/// attention keep only q, k, v, the output and the log-sum-exp.
enum class Attention { eager, sdpa, flash };

/// What runs and how, independent of the GPU.
struct JobSpec {
  ModelSpec model;
  Task task = Task::finetune;
  /// Training tokens; inference: generated (output) tokens. Unset: memory and fit only, no time or cost.
  std::optional<double> tokens;
  int seq = 0;            ///< sequence length (inference: context = prompt + output)
  int batch = 1;          ///< training: micro-batch per GPU; inference: concurrent sequences per replica
  int prompt_tokens = 0;  ///< inference: prompt length of each request
  Precision precision = Precision::mixed;
  Optimizer optimizer = Optimizer::adamw;
  Recompute recompute = Recompute::selective;
  Attention attention = Attention::sdpa;  ///< PyTorch 2 / transformers default
  bool keep_logits = false;  ///< the training loop holds the logits through backward (outputs = model(...))
  int lora_rank = 16;
  bool qlora = false;
  double overhead_fixed_bytes = 1073741824.0;  ///< CUDA context, cuBLAS/NCCL workspaces (1 GiB)
  double fragmentation = 0.10;                 ///< allocator fragmentation, fraction of the rest
};

/// True for LoRA / QLoRA (frozen base, trainable adapters).
bool uses_adapters(const JobSpec& job);

/// How the job is spread over GPUs.
struct Parallelism {
  int dp = 1;       ///< data-parallel degree (inference: replicas)
  int tp = 1;       ///< tensor parallel
  int pp = 1;       ///< pipeline parallel
  int zero = 0;     ///< ZeRO stage 0..3 over dp (FSDP full shard = 3)
  bool sp = false;  ///< sequence parallel (on with tp > 1)
  int gpus() const { return dp * tp * pp; }
};

// ---------------------------------------------------------------------------------------------- memory

/// One tensor group live at the peak.
struct MemoryTerm {
  std::string name;  ///< e.g. "activations", "log-softmax gradient"
  double bytes = 0;
};
/// When the training peak happens and what is live then (docs/plan.md "The peak").
struct PeakDetail {
  std::string phase;  ///< "forward", "loss backward", "backward end", "optimizer step"; "inference"
  double bytes = 0;   ///< what torch.cuda.max_memory_allocated() reports
  std::vector<MemoryTerm> terms;   ///< live at the peak; they sum to `bytes`
  std::vector<MemoryTerm> phases;  ///< every phase's total (name = phase)
};

/// Bytes per GPU. Mixed precision: with ZeRO ≥ 1, fp32 master weights count under optimizer (ZeRO's
/// accounting: 2 + 2 + 12); without (PyTorch autocast) weights and gradients are fp32 (4 + 4 + 8) and
/// autocast's bf16 weight copies live through forward and backward.
struct MemoryBreakdown {
  double weights_bytes = 0;
  double gradients_bytes = 0;
  double optimizer_bytes = 0;
  double activations_bytes = 0;
  double kv_cache_bytes = 0;
  double weight_copies_bytes = 0;  ///< autocast's bf16 copies of the weights (mixed, no ZeRO)
  double peak_bytes = 0;           ///< the allocator's peak: max over the phases (total − overhead)
  PeakDetail peak;
  double overhead_bytes = 0;
  double total_bytes = 0;
  double trainable_params = 0;    ///< whole model (LoRA: the adapters)
  bool activations_known = true;  ///< false when the model's shape is unknown (--params only)
};

/// Bytes per trainable parameter of weights, gradients and optimizer states (K) for a precision.
struct StateBytes {
  double weights = 0;
  double gradients = 0;
  double optimizer = 0;
};
/// Per-parameter bytes: mixed AdamW = 2 + 2 + 12 (ZeRO, Rajbhandari et al. 2020).
StateBytes state_bytes(Precision precision, Optimizer optimizer);
/// Model states per GPU for `params` sharded by ZeRO `stage` over `dp` GPUs.
StateBytes zero_model_states(double params, StateBytes per_param, int stage, int dp);
/// Bytes one transformer layer keeps for its backward pass, per token: `replicated` and `split` per hidden
/// element (without sequence parallelism only `split` is divided by tensor parallelism), `attention` per
/// attention-score element (heads · seq per token; gone with selective recompute or flash attention),
/// `input` per hidden element of the layer's input (all that full recompute keeps).
struct LayerActivationTerms {
  double replicated = 10;
  double split = 24;
  double attention = 5;
  double input = 2;
};
/// Korthikanti et al. 2022 Table 2 terms (Megatron-LM GPT layer, 16-bit): 10 + 24 = 34 and 5, with an MLP
/// whose share of the 34 is `mlp_coeff` (19 for a 4h GPT MLP).
LayerActivationTerms korthikanti_terms(double mlp_coeff = 19.0);
/// The tensors a PyTorch layer of this model (as its `impl` writes it) saves at `precision` with
/// `attention`, byte by byte (docs/accuracy.md). Mixed = autocast: fp32 residual stream and norms, each
/// linear's input cast to bf16. For a GPT layer with a fused GELU in 16 bit these are Korthikanti's.
LayerActivationTerms layer_terms(const ModelSpec& model, Precision precision, Attention attention);
/// layer_terms with eager attention.
LayerActivationTerms eager_layer_terms(const ModelSpec& model, Precision precision);
/// Activation bytes of one layer with `terms`; `sp` = sequence parallel.
double layer_activation_bytes(double seq, double batch, double hidden, double heads, int tp, bool sp,
                              Recompute recompute, const LayerActivationTerms& terms);
/// Korthikanti et al. 2022 Table 2 activation bytes of one transformer layer (16-bit activations).
/// `mlp_coeff` is the MLP's share of the 34 (19 for a 4h GPT MLP); `sp` = sequence parallel.
double activation_bytes_per_layer(double seq, double batch, double hidden, double heads, int tp, bool sp,
                                  Recompute recompute, double mlp_coeff = 19.0);
/// KV cache bytes per token: 2 · layers · kv_heads · head_dim · bytes.
double kv_cache_bytes_per_token(const ModelSpec& model, double bytes_per_element);
/// LoRA adapter parameters of rank `rank` on every linear layer of attention and MLP.
double lora_params(const ModelSpec& model, int rank);
/// Memory per GPU of the job under `par`.
MemoryBreakdown estimate_memory(const JobSpec& job, const Parallelism& par);

// ---------------------------------------------------------------------------------------------- compute

/// FLOPs of the whole job.
struct ComputeEstimate {
  double model_flops = 0;      ///< what MFU is measured against (PaLM Appendix B)
  double hardware_flops = 0;   ///< plus recomputation
  double attention_flops = 0;  ///< the 12·L·h·s·D term (part of model_flops)
  double prefill_flops = 0;    ///< inference
  double decode_flops = 0;     ///< inference
  double requests = 0;         ///< inference: tokens / output length
};
/// Training 6·N·D (+ attention), LoRA 4·N·D + 6·N_adapter·D, inference 2·N per token.
/// Needs `job.tokens`.
ComputeEstimate estimate_compute(const JobSpec& job);
/// 6 · params · tokens (Kaplan et al. 2020).
double dense_training_flops(double params, double tokens);
/// A default value with the reason it was chosen.
struct StatedDefault {
  double value = 0;
  std::string reason;
};
/// Default MFU for the job (by task and scale).
StatedDefault default_mfu(const JobSpec& job);
/// Dense peak TFLOPS of a GPU for a precision (mixed/bf16 → BF16 dense, fp16 → FP16 dense, fp32 → FP32).
std::optional<double> peak_tflops(const catalog::GpuSpec& gpu, Precision precision);
// ---------------------------------------------------------------------------------------------- MFU of a run
/// Training FLOPs per token of a model, with where the figure came from (for the report's mfu_basis).
struct FlopsPerToken {
  double flops = 0;
  std::string basis;
};
/// The planner's training FLOPs for one token of the model `gpumeter run --model NAME|PATH` names (resolved
/// as `plan --model` resolves it: the table, a Hugging Face config file or folder, a TOML file, a cached Hub
/// id) at `seq`, else at the model's own context: what a run's MFU is measured against (docs/plan.md).
/// Usage error for a CNN (its work is not counted in tokens).
Result<FlopsPerToken> run_flops_per_token(std::string_view name_or_path, std::optional<int> seq,
                                          const ModelSearch& search);
/// What a run's MFU is measured with, from `run` / `attach` --model, --flops-per-token, --seq, --precision:
/// each checked (a usage error says which flag is wrong and why), then the FLOPs per token
/// (--flops-per-token, else run_flops_per_token of --model at --seq; nullopt without either) and their basis.
struct RunMfuBasis {
  std::optional<double> flops_per_token;
  std::string basis;
};
Result<RunMfuBasis> resolve_run_mfu(const std::optional<std::string>& model,
                                    std::optional<double> flops_per_token, std::optional<int> seq,
                                    const std::string& precision);
/// Dense peak TFLOPS of a GPU at "bf16", "fp16", "fp8", "tf32" or "fp32"; nullopt when the catalog lacks it.
std::optional<double> dense_peak_tflops(const catalog::GpuSpec& gpu, std::string_view precision);
/// Seconds to run `flops` on `gpus` GPUs of `peak_tflops` at `mfu`.
double compute_time_s(double flops, int gpus, double peak_tflops, double mfu);

/// Time of the job on `gpus` GPUs of one model.
struct TimeEstimate {
  double time_s = 0;
  double prefill_s = 0;  ///< inference
  double decode_s = 0;   ///< inference
  std::string bound;     ///< "compute" or "memory bandwidth"
};
TimeEstimate estimate_time(const JobSpec& job, const ComputeEstimate& compute, const MemoryBreakdown& memory,
                           const Parallelism& par, const catalog::GpuSpec& gpu, double mfu,
                           double bandwidth_efficiency);

// ---------------------------------------------------------------------------------------------- spot

/// Young 1974: √(2·δ·M).
double young_interval_s(double checkpoint_s, double mtbi_s);
/// Daly 2006 higher-order optimum: √(2δM)·(1 + ⅓√(δ/2M) + (δ/2M)/9) − δ for δ < 2M, else M.
double daly_interval_s(double checkpoint_s, double mtbi_s);

/// Inputs of the spot expectation for one job.
struct SpotInputs {
  double work_s = 0;                  ///< uninterrupted compute time
  double interruptions_per_hour = 0;  ///< for the whole job (all instances)
  double checkpoint_s = 0;            ///< δ: time to write one checkpoint
  double restart_s = 0;               ///< getting capacity back, loading the checkpoint
  std::optional<double> notice_s;     ///< provider's interruption notice
};
/// Expected outcome: wall time W·(1 + δ/τ) / (1 − (R + lost)/M), lost = (τ + δ)/2 or 0 when the notice
/// allows a final checkpoint.
struct SpotOutcome {
  bool feasible = true;  ///< false when interruptions come faster than progress
  double wall_s = 0;
  double interval_s = 0;  ///< Daly optimum
  double mtbi_s = 0;
  double expected_interruptions = 0;
  double checkpoint_overhead_s = 0;
  double restart_overhead_s = 0;
  double redone_s = 0;
  bool checkpoint_on_notice = false;
};
SpotOutcome expected_spot(const SpotInputs& in);

// ---------------------------------------------------------------------------------------------- ranking

/// One catalog offer with what planning needs about its provider and region.
struct OfferContext {
  catalog::Offer offer;
  catalog::GpuSpec gpu;
  catalog::BillingRule billing;
  std::optional<double> carbon_g_per_kwh;
  std::string carbon_dataset;
  std::optional<double> pue;
};
/// Every offer of the catalog with its GPU spec, billing rule, carbon intensity and PUE.
std::vector<OfferContext> offers_from_catalog(const catalog::Catalog& catalog);

enum class Objective { cost, time, score };

/// Weights of the score; they sum to 1.
struct Weights {
  double cost = 0.4;
  double perf = 0.3;
  double memory = 0.1;
  double risk = 0.1;
  double carbon = 0.1;
};
/// Parses "cost=0.3,perf=0.3,memory=0.2,risk=0.1,carbon=0.1" (missing keys are 0; must sum to 1).
Result<Weights> parse_weights(std::string_view text);

/// Everything the user asked for.
struct PlanRequest {
  JobSpec job;
  std::optional<int> dp;
  std::optional<int> tp;  ///< unset: 1 for training; inference picks the fewest that fit
  std::optional<int> pp;
  std::optional<int> zero;  ///< unset: lowest stage that fits
  bool fsdp = false;
  std::optional<int> gpus;         ///< total GPUs
  std::optional<std::string> gpu;  ///< restrict to this GpuSpec::id
  std::optional<double> mfu;
  double bandwidth_efficiency = 0.7;  ///< decode: achieved / peak memory bandwidth
  bool spot = false;
  Objective objective = Objective::cost;
  Weights weights;
  std::optional<double> interruptions_per_hour;  ///< per instance; unset: provider default
  std::optional<double> checkpoint_s;            ///< unset: checkpoint bytes / write bandwidth
  double checkpoint_write_bytes_per_s = 2e9;     ///< per instance
  double restart_s = 600;
  int max_gpus = 4096;
};

/// Score components in [0, 1] (1 best) and the weighted total.
struct ScoreBreakdown {
  double cost = 0;
  double perf = 0;
  double memory = 0;
  double risk = 0;
  std::optional<double> carbon;  ///< unknown grid intensity: not scored
  double total = 0;
};

/// One ranked way to run the job.
struct PlanOption {
  std::string provider;
  std::string region;
  std::string instance;
  std::string gpu;
  double gpus_per_instance = 0;
  int instances = 0;
  Parallelism parallel;
  MemoryBreakdown memory;
  double gpu_memory_bytes = 0;
  double headroom_bytes = 0;  ///< negative when it does not fit
  bool fits = false;
  std::optional<double> time_h;  ///< unset without tokens; infinite when spot never finishes
  std::optional<double> billed_h;
  double usd_per_hour = 0;         ///< all instances
  std::optional<double> cost_usd;  ///< unset without tokens
  bool spot = false;
  std::optional<double> usd_per_million_tokens;
  std::optional<SpotOutcome> spot_detail;
  double interruptions_per_hour = 0;  ///< all instances (spot)
  std::optional<double> energy_kwh;
  std::optional<double> carbon_kg;
  std::string carbon_dataset;
  std::string bound;
  ScoreBreakdown score;
  std::vector<std::string> flags;  ///< catalog sanity flags of the offer
};

/// Verdict of one GPU model for the requested configuration.
struct GpuVerdict {
  std::string gpu;
  double memory_bytes = 0;
  bool fits = false;
  double headroom_bytes = 0;
  Parallelism parallel;  ///< the configuration checked (fewest GPUs that fit, or the user's)
  MemoryBreakdown memory;
};

/// A default or derived value that the plan used.
struct Assumption {
  std::string key;
  std::string value;
  std::string source;
};

struct PlanResult {
  JobSpec job;                             ///< with defaults resolved
  Parallelism parallel;                    ///< of the first option (or the checked configuration)
  MemoryBreakdown memory;                  ///< per GPU, of `parallel`
  std::optional<ComputeEstimate> compute;  ///< unset without tokens
  std::vector<GpuVerdict> verdicts;
  std::vector<PlanOption> options;  ///< ranked, best first; options that do not fit last
  std::vector<Assumption> assumptions;
  std::vector<std::string> notes;
};

/// Longest default sequence of a training job and of an inference job (the model's native length is capped).
inline constexpr int kDefaultSeqCapTraining = 2048;
inline constexpr int kDefaultSeqCapInference = 4096;

/// Fills unset job fields with defaults for the task and model (sequence, precision, recompute...).
JobSpec resolve_job_defaults(const JobSpec& job, bool seq_given, bool precision_given, bool recompute_given);

/// Which job settings the user gave; the others are defaults, stated as assumptions.
struct GivenSettings {
  bool seq = false, batch = false, precision = false, optimizer = false, recompute = false;
  bool lora_rank = false, zero = false, fsdp = false, gpus = false, dp = false;
};
/// Puts the defaults the plan used for the settings the user did not give first among the assumptions,
/// each with its value and the rule that chose it.
void add_default_assumptions(PlanResult& result, const GivenSettings& given);
/// How a setting left out gets its value, in words, for `plan --help` (the rules resolve_job_defaults,
/// make_plan and compute_tco apply): "precision" gives "mixed; bf16 for lora/inference". Keys are the flags'
/// names without "--": task, prompt-tokens, precision, optimizer, zero, lora-rank, gpus, mfu,
/// interruption-rate, checkpoint-s, restart-s, optimize, pue, gpu-power-w. Empty for any other key.
std::string default_rule(std::string_view setting);
/// A job as `plan`'s flags give it: names and counts as text (parsed by parse_task, parse_count, ...), unset
/// where the flag was not given.
struct PlanSettings {
  std::optional<std::string> model, params, model_file, tokens;
  std::string task = default_rule("task");
  std::optional<int> seq, batch, prompt_tokens;
  std::optional<std::string> precision, recompute, attention, weights, optimize, optimizer;
  std::optional<int> dp, tp, pp, zero, gpus, lora_rank;
  std::optional<int> layers, hidden, heads, kv_heads, ffn, vocab;
  bool fsdp = false, qlora = false, spot = false, keep_logits = false;
  std::optional<double> mfu, interruption_rate, checkpoint_s, restart_s;
};
/// The request `settings` describe: the model (--model from the table, a file or the Hub cache, or
/// --model-file; --params and the shape overrides over it), the task and its settings with their defaults
/// (resolve_job_defaults), parallelism, spot and ranking. Usage errors name the flag and why.
Result<PlanRequest> request_from_settings(const PlanSettings& settings);
/// Which of the settings the user gave (the assumptions a plan states are about the others).
GivenSettings given_settings(const PlanSettings& settings);
/// Default interruptions per instance-hour of a provider's spot capacity, with its reason.
StatedDefault default_interruption_rate(std::string_view provider);
/// Plans the job over `offers` (GPU specs from the offers).
Result<PlanResult> make_plan(const PlanRequest& request, const std::vector<OfferContext>& offers);
/// Fills every option's score with `weights` (min-max over the options that fit).
void score_options(std::vector<PlanOption>& options, const Weights& weights);

// ---------------------------------------------------------------------------------------------- TCO

/// Own hardware vs cloud over a number of years: the money is meter's (meter/meter.h, `compute_tco`).
using TcoInput = gm::meter::TcoInput;
using TcoResult = gm::meter::TcoResult;
using gm::meter::compute_tco;
/// `in` for the catalog GPU `gpu_name`: its id, the power per GPU (`gpu_power_w`, else the catalog's TDP),
/// the PUE when given, and the cloud price (`cloud_usd_per_gpu_hour`, else the catalog's median on-demand
/// $/GPU-h, with its source). Usage errors name an unknown GPU (with the closest name) or the flag a missing
/// figure needs.
Result<TcoInput> resolve_tco_input(const catalog::Catalog& catalog, const std::string& gpu_name, TcoInput in,
                                   std::optional<double> gpu_power_w,
                                   std::optional<double> cloud_usd_per_gpu_hour, std::optional<double> pue);

// ---------------------------------------------------------------------------------------------- names

std::string_view task_name(Task task);
std::string_view precision_name(Precision precision);
std::string_view optimizer_name(Optimizer optimizer);
std::string_view recompute_name(Recompute recompute);
std::string_view attention_name(Attention attention);
std::string_view arch_name(Arch arch);

/// A setting as its flag takes it, in any case: a usage error "--task 'x' is not one of train, finetune, ..."
/// otherwise.
Result<Task> parse_task(std::string_view text);
Result<Precision> parse_precision(std::string_view text);
Result<Optimizer> parse_optimizer(std::string_view text);
Result<Recompute> parse_recompute(std::string_view text);
Result<Attention> parse_attention(std::string_view text);
Result<Objective> parse_objective(std::string_view text);  ///< --optimize
/// "7e9", "7B", "770M", "1.5T" (K, M, B or G, T suffixes) as a positive count; a usage error naming `flag`.
Result<double> parse_count(const std::string& text, const char* flag);
/// Where `--model ORG/NAME` looks for Hugging Face Hub caches (`plan`, `run --model`): $HF_HUB_CACHE,
/// $HF_HOME/hub, $XDG_CACHE_HOME/huggingface/hub, ~/.cache/huggingface/hub (those set).
ModelSearch hf_hub_search();

}  // namespace gm::plan
