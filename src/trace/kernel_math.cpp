// What a GPU kernel computes with (docs/findings.md `fp32_math`, `unfused_attention`): from the dtypes of its
// launching GEMM / convolution operator when the trace recorded shapes, else from a table of kernel families.
#include <algorithm>
#include <array>
#include <cctype>
#include <string>

#include "trace/internal.h"
#include "trace/trace.h"

namespace gm::trace {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

bool has_any(const std::string& s, std::initializer_list<std::string_view> parts) {
  return std::any_of(parts.begin(), parts.end(),
                     [&](std::string_view p) { return s.find(p) != std::string::npos; });
}

/// The first template argument is `float` ("dgrad_engine<float, 512, …>", "winogradForwardData4x4<float,
/// …>").
bool first_template_arg_is_float(const std::string& s) {
  const auto lt = s.find('<');
  if (lt == std::string::npos) return false;
  auto p = lt + 1;
  while (p < s.size() && s[p] == ' ') ++p;
  if (s.compare(p, 5, "float") != 0) return false;
  p += 5;
  return p < s.size() && (s[p] == ',' || s[p] == '>' || s[p] == ' ');
}

/// Helpers around the math that a GEMM / convolution operator also launches: matrix-vector products, layout
/// transforms, normalisations, scaling and padding passes, elementwise kernels (memory-bound: tensor cores
/// do not help).
bool helper_kernel(const std::string& s) {
  return has_any(s, {"gemv", "nchwtonhwc", "nhwctonchw", "bn_fw", "bn_bw", "batch_norm", "elementwise",
                     "scalepackedtensor", "addpadding", "splitkreduce", "reduce_splitk", "reducesplitk",
                     "computeoffsets"});
}

/// Tensor-core math, positively: the MMA instruction family (hmma, imma, wgmma, gmma), cuBLASLt's nvjet
/// kernels, the MMA shape (884 Volta, 1688 Turing / Ampere TF32, 16816 and 16832 Ampere+), tensorop, or a
/// reduced element type (fp16, bf16, tf32, fp8, int8). "xmma" alone says nothing: cuBLAS / cuDNN name their
/// fp32 FFMA kernels sm80_xmma_…_ffma too.
bool tensor_core_marker(const std::string& s) {
  // AMD matrix cores: Tensile kernels name their MFMA instruction ("…_MI16x16x1_…").
  for (auto p = s.find("_mi"); p != std::string::npos; p = s.find("_mi", p + 3))
    if (p + 3 < s.size() && std::isdigit(static_cast<unsigned char>(s[p + 3]))) return true;
  return has_any(s, {"mfma",  "hmma",  "imma",     "wgmma",      "gmma",  "nvjet", "884",  "1688",
                     "16816", "16832", "tensorop", "tensor16x8", "fp16",  "bf16",  "tf32", "f16",
                     "fp8",   "e4m3",  "e5m2",     "half",       "hgemm", "int8"});
}

}  // namespace

KernelMath kernel_math(std::string_view kernel_name) {
  const std::string s = lower(kernel_name);
  if (helper_kernel(s)) return KernelMath::other;
  const bool matrix = has_any(
      s, {"gemm", "scudnn", "884cudnn", "1688cudnn", "16816cudnn", "convolve", "convolution", "conv2d",
          "conv3d", "conv1d", "dgrad", "wgrad", "fprop", "winograd", "nvjet", "gemmsn", "xmma", "cijk_"});
  if (!matrix) return KernelMath::other;
  if (tensor_core_marker(s)) return KernelMath::tensor_core;
  // fp32 on the CUDA cores, by family: cuBLAS SIMT kernels (volta_sgemm_…, sgemm_largek, gemmSN_…), cuBLAS /
  // cuDNN xmma kernels on FFMA (sm80_xmma_gemm_f32f32_f32f32_f32_…_ffma_…), cutlass SIMT
  // (cutlass_80_simt_sgemm), cuDNN's fp32 engines (ampere_scudnn_…, implicit_convolve_sgemm,
  // dgrad_engine<float, …>, winograd<float>).
  if (has_any(s, {"sgemm", "scudnn", "simt_s", "gemmsn", "_ffma", "f32f32_f32f32"}) ||
      first_template_arg_is_float(s))
    return KernelMath::fp32;
  return KernelMath::other;
}

bool is_fused_attention_kernel(std::string_view kernel_name) {
  const std::string s = lower(kernel_name);
  return has_any(s, {"flash_fwd", "flash_bwd", "flashattn", "flash_attn", "fmha", "efficient_attention",
                     "mem_eff_attention", "attention_kernel", "cudnn_sdpa", "sdpa_"});
}

namespace detail {

bool is_matrix_operator(std::string_view op) {
  if (!op.starts_with("aten::")) return false;
  op.remove_prefix(6);
  static constexpr std::array<std::string_view, 25> kOps = {
      "mm", "addmm", "bmm", "baddbmm", "addbmm", "_addmm_activation", "matmul", "linear", "convolution",
      "_convolution", "conv1d", "conv2d", "conv3d", "cudnn_convolution", "cudnn_convolution_transpose",
      "convolution_backward", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
      "miopen_convolution", "mkldnn_convolution", "_convolution_mode",
      // PyTorch 1.x names of the cuDNN backward passes (2021 traces)
      "cudnn_convolution_backward", "cudnn_convolution_backward_input", "cudnn_convolution_backward_weight"};
  return std::find(kOps.begin(), kOps.end(), op) != kOps.end();
}

bool is_tensor_dtype(std::string_view t) {
  return !t.empty() && ((t.front() >= 'a' && t.front() <= 'z') || t.starts_with("c10::"));
}

OpDtype op_dtype(std::string_view t) {
  if (t == "float") return OpDtype::fp32;
  if (t == "c10::BFloat16" || t == "c10::Half" || t.starts_with("c10::Float8")) return OpDtype::reduced;
  if (t.empty()) return OpDtype::unknown;
  return OpDtype::other;
}

KernelMath activity_math(std::string_view kernel_name, OpDtype dtype) {
  if (dtype == OpDtype::unknown) return kernel_math(kernel_name);
  const std::string s = lower(kernel_name);
  if (helper_kernel(s)) return KernelMath::other;
  // The name wins where it names tensor-core math: TF32 kernels of an fp32 operator are tensor-core math.
  if (tensor_core_marker(s)) return KernelMath::tensor_core;
  // Every other kernel of an fp32 GEMM / convolution is its fp32 math (cuDNN's FFT and Winograd passes
  // included); a bf16 / fp16 operator's kernel without a tensor-core marker is neither.
  return dtype == OpDtype::fp32 ? KernelMath::fp32 : KernelMath::other;
}

}  // namespace detail
}  // namespace gm::trace
