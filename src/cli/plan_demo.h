#pragma once
// The plan section of `gpumeter demo`.
#include <cstdio>

namespace gm::cli {

/// Prints a short plan (Llama-3-8B LoRA fine-tune of 2e9 tokens, the top 3 catalog offers) to `out`;
/// returns kExitOk, or kExitFailure after printing why.
int plan_demo_section(std::FILE* out);

}  // namespace gm::cli
