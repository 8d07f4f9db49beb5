#pragma once
// Internal to plan: the element sizes and the activations outside the layers, shared by memory.cpp and
// activations.cpp.
#include "plan/plan.h"

namespace gm::plan {

/// Bytes of an fp32 element (fp32 upcasts, softmax and loss terms).
inline constexpr double kFp32Bytes = 4.0;

/// Bytes of an activation element in the compute dtype (2 for mixed, bf16, fp16; 4 for fp32).
double activation_bytes(Precision precision);
/// Bytes of a residual-stream element (fp32 under autocast: fp32 embeddings promote every residual add).
double residual_bytes(Precision precision);
/// Bytes per token kept outside the layers: embedding dropout mask, final norm, the head's input.
double outside_layers_token_bytes(const ModelSpec& model, Precision precision);

}  // namespace gm::plan
