#pragma once
// Rendering of `gpumeter plan` results: the readable report and the --json document.
#include <string>

#include "plan/plan.h"

namespace gm::report {

/// The one-line recommendation (or why nothing fits).
std::string plan_recommendation(const plan::PlanResult& result);
/// The readable report: job, memory breakdown, GPU verdicts, the top `top` options, recommendation,
/// assumptions (`brief`: without the GPU verdicts and the assumptions).
std::string render_plan_text(const plan::PlanResult& result, std::size_t top, plan::Objective objective,
                             bool brief = false);
/// The --json document (stable keys, units in the names; `null` for unknown figures).
std::string render_plan_json(const plan::PlanResult& result, plan::Objective objective);
/// The built-in model table (text table or JSON array).
std::string render_model_list(bool json);
/// The TCO report (text or JSON), every input shown.
std::string render_tco(const plan::TcoInput& in, const plan::TcoResult& r, bool json);
/// The plan section of `gpumeter demo`: a Llama-3-8B LoRA fine-tune of 2e9 tokens, the top 3 catalog offers.
Result<std::string> render_plan_demo();

}  // namespace gm::report
