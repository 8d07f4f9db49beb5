// The names of the planner's settings (text for reports and JSON, and back from flags), counts as people
// write them, and where Hugging Face Hub caches are.
#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <cstdlib>

#include "plan/plan.h"
#include "util/enum_text.h"
#include "util/units.h"

namespace gm::plan {

constexpr util::EnumText<Task> kTasks[] = {{Task::train, "train"},
                                           {Task::finetune, "finetune"},
                                           {Task::lora, "lora"},
                                           {Task::inference, "inference"}};

std::string_view task_name(Task task) {
  return util::enum_text(kTasks, task, "train");
}

constexpr util::EnumText<Precision> kPrecisions[] = {{Precision::fp32, "fp32"},
                                                     {Precision::bf16, "bf16"},
                                                     {Precision::fp16, "fp16"},
                                                     {Precision::mixed, "mixed"}};

std::string_view precision_name(Precision p) {
  return util::enum_text(kPrecisions, p, "mixed");
}

constexpr util::EnumText<Optimizer> kOptimizers[] = {
    {Optimizer::adamw, "adamw"}, {Optimizer::adam8bit, "adam8bit"}, {Optimizer::sgd, "sgd"}};

std::string_view optimizer_name(Optimizer o) {
  return util::enum_text(kOptimizers, o, "adamw");
}

constexpr util::EnumText<Recompute> kRecomputes[] = {
    {Recompute::none, "none"}, {Recompute::selective, "selective"}, {Recompute::full, "full"}};

std::string_view recompute_name(Recompute r) {
  return util::enum_text(kRecomputes, r, "none");
}

constexpr util::EnumText<Attention> kAttentions[] = {
    {Attention::eager, "eager"}, {Attention::sdpa, "sdpa"}, {Attention::flash, "flash"}};

std::string_view attention_name(Attention a) {
  return util::enum_text(kAttentions, a, "sdpa");
}

constexpr util::EnumText<Objective> kObjectives[] = {
    {Objective::cost, "cost"}, {Objective::time, "time"}, {Objective::score, "score"}};

namespace {

/// `text` (any case) as one of `table`'s values; a usage error naming `flag` and the choices otherwise.
template <class E, std::size_t N>
Result<E> parse_setting(const util::EnumText<E> (&table)[N], std::string_view text, const char* flag) {
  if (auto v = util::enum_from_text(table, util::to_lower(text))) return *v;
  return make_error(ErrorKind::usage,
                    fmt::format("{} '{}' is not one of {}", flag, text, util::enum_texts(table)));
}

}  // namespace

Result<Task> parse_task(std::string_view text) {
  return parse_setting(kTasks, text, "--task");
}
Result<Precision> parse_precision(std::string_view text) {
  return parse_setting(kPrecisions, text, "--precision");
}
Result<Optimizer> parse_optimizer(std::string_view text) {
  return parse_setting(kOptimizers, text, "--optimizer");
}
Result<Recompute> parse_recompute(std::string_view text) {
  return parse_setting(kRecomputes, text, "--recompute");
}
Result<Attention> parse_attention(std::string_view text) {
  return parse_setting(kAttentions, text, "--attention");
}
Result<Objective> parse_objective(std::string_view text) {
  return parse_setting(kObjectives, text, "--optimize");
}

/// "7e9", "7B", "770M", "1.5T", "2e9" → a positive count.
Result<double> parse_count(const std::string& text, const char* flag) {
  std::string s(util::trim(text));
  double scale = 1;
  if (!s.empty()) {
    switch (std::toupper(static_cast<unsigned char>(s.back()))) {
      case 'K':
        scale = 1e3;
        break;
      case 'M':
        scale = 1e6;
        break;
      case 'B':
      case 'G':
        scale = 1e9;
        break;
      case 'T':
        scale = 1e12;
        break;
      default:
        break;
    }
    if (scale != 1) s.pop_back();
  }
  auto v = util::parse_number(s);
  if (!v || !std::isfinite(*v) || !(*v > 0))
    return make_error(ErrorKind::usage,
                      fmt::format("{} '{}' must be a positive number (e.g. 2e9, 7B, 770M)", flag, text));
  return *v * scale;
}

ModelSearch hf_hub_search() {
  plan::ModelSearch s;
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return v && *v ? std::string(v) : std::string();
  };
  if (auto c = env("HF_HUB_CACHE"); !c.empty()) s.hub_caches.push_back(c);
  if (auto h = env("HF_HOME"); !h.empty()) s.hub_caches.push_back(h + "/hub");
  if (auto x = env("XDG_CACHE_HOME"); !x.empty()) s.hub_caches.push_back(x + "/huggingface/hub");
  if (auto home = env("HOME"); !home.empty()) s.hub_caches.push_back(home + "/.cache/huggingface/hub");
  return s;
}

}  // namespace gm::plan
