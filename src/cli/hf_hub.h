#pragma once
// Where `--model ORG/NAME` looks for Hugging Face Hub caches (`plan`, `run --model`).
#include "plan/plan.h"

namespace gm::cli {

/// $HF_HUB_CACHE, $HF_HOME/hub, $XDG_CACHE_HOME/huggingface/hub, ~/.cache/huggingface/hub (those set).
plan::ModelSearch hf_hub_search();

}  // namespace gm::cli
