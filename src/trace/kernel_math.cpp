// What a GPU kernel computes with, from its name (docs/findings.md `fp32_math`, `unfused_attention`).
#include <algorithm>
#include <array>
#include <cctype>
#include <string>

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

}  // namespace

KernelMath kernel_math(std::string_view kernel_name) {
  const std::string s = lower(kernel_name);
  // Matrix-vector products, layout transforms and normalisations are memory-bound: tensor cores do not help.
  if (has_any(s, {"gemv", "nchwtonhwc", "nhwctonchw", "bn_fw", "bn_bw", "batch_norm", "elementwise"}))
    return KernelMath::other;
  const bool matrix =
      has_any(s, {"gemm", "scudnn", "884cudnn", "1688cudnn", "16816cudnn", "convolve", "convolution",
                  "conv2d", "conv3d", "conv1d", "dgrad", "wgrad", "fprop", "winograd"});
  if (!matrix) return KernelMath::other;
  // Tensor-core kernels name their MMA shape (884 Volta, 1688 Turing/Ampere TF32, 16816 Ampere+), their
  // element types (fp16, bf16, tf32, fp8, half) or their instruction family (xmma, hmma, imma, wgmma, gmma).
  if (has_any(s, {"884",   "1688", "16816",    "16832",      "xmma", "hmma",  "imma",
                  "wgmma", "gmma", "tensorop", "tensor16x8", "fp16", "bf16",  "tf32",
                  "f16",   "fp8",  "e4m3",     "e5m2",       "half", "hgemm", "int8"}))
    return KernelMath::tensor_core;
  // fp32 on the CUDA cores: cuBLAS/cuDNN SIMT kernels (volta_sgemm_…, ampere_scudnn_…, cutlass_simt_sgemm)
  // and templates whose element type is float.
  if (has_any(s, {"sgemm", "scudnn", "simt_s"}) || first_template_arg_is_float(s)) return KernelMath::fp32;
  return KernelMath::other;
}

bool is_fused_attention_kernel(std::string_view kernel_name) {
  const std::string s = lower(kernel_name);
  return has_any(s, {"flash_fwd", "flash_bwd", "flashattn", "flash_attn", "fmha", "efficient_attention",
                     "mem_eff_attention", "attention_kernel", "cudnn_sdpa", "sdpa_"});
}

}  // namespace gm::trace
