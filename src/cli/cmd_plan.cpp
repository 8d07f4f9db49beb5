// gpumeter plan --model NAME|--params N|--model-file F [...] --task train|finetune|lora|inference [...]
// [--json] gpumeter plan tco --gpu NAME --capex-usd N [...] [--json]
#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "catalog/catalog.h"
#include "cli/cli.h"
#include "cli/common.h"
#include "cli/plan_demo.h"
#include "plan/plan.h"
#include "report/plan_render.h"
#include "util/units.h"

namespace gm::cli {

namespace {

constexpr const char* kCmd = "plan";

/// `plan`'s flags: the job (plan::PlanSettings) and how to show the plan.
struct PlanFlags : plan::PlanSettings {
  std::optional<std::string> gpu;
  bool json = false, list_models = false;
  std::size_t top = 10;
  std::optional<std::string> catalog_file;
};

int run_tco(int argc, char** argv) {
  CLI::App app{"Own hardware vs cloud over N years, with the break-even utilization", "plan tco"};
  std::string gpu_name;
  plan::TcoInput in;
  std::optional<double> gpu_power_w, cloud_price, pue;
  std::optional<std::string> catalog_file;
  bool as_json = false;
  app.add_option("--gpu", gpu_name, "GPU model (catalog name, e.g. H100, A100-80GB, L4)")->required();
  app.add_option("--gpus", in.gpus, "GPUs in the system")->capture_default_str();
  app.add_option("--years", in.years, "years of ownership (depreciation period)")->capture_default_str();
  app.add_option("--capex-usd", in.capex_usd, "purchase price of the whole system, USD")->required();
  app.add_option("--gpu-power-w", gpu_power_w,
                 "power per GPU at load, W (default: " + plan::default_rule("gpu-power-w") + ")");
  app.add_option("--host-power-w", in.host_power_w, "CPU, memory and network of the system at load, W")
      ->capture_default_str();
  app.add_option("--idle-power", in.idle_power_fraction, "idle draw as a fraction of full load")
      ->capture_default_str();
  app.add_option("--pue", pue, "data-centre PUE of your site (default " + plan::default_rule("pue") + ")");
  app.add_option("--usd-per-kwh", in.usd_per_kwh, "electricity price, USD/kWh")->capture_default_str();
  app.add_option("--ops-usd-per-year", in.ops_usd_per_year, "staff, space, support contracts per year, USD")
      ->capture_default_str();
  app.add_option("--utilization", in.utilization, "fraction of hours the GPUs do useful work")
      ->capture_default_str();
  app.add_option("--cloud-usd-per-gpu-hour", cloud_price,
                 "cloud price to compare with (default: the catalog's median on-demand $/GPU-h of this GPU)");
  app.add_option("--catalog", catalog_file, "offers CSV merged over the built-in catalog");
  app.add_flag("--json", as_json, "machine-readable output");
  if (auto rc = parse_args(app, argc, argv)) return *rc;

  auto catalog = catalog::load_catalog(catalog_file);
  if (!catalog) return fail("plan tco", catalog.error());
  auto resolved = plan::resolve_tco_input(*catalog, gpu_name, in, gpu_power_w, cloud_price, pue);
  if (!resolved) return fail("plan tco", resolved.error());
  in = *resolved;
  auto r = plan::compute_tco(in);
  if (!r) return fail("plan tco", r.error());
  std::fputs(report::render_tco(in, *r, as_json).c_str(), stdout);
  return util::kExitOk;
}

}  // namespace

int cmd_plan(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "tco") == 0) return run_tco(argc - 1, argv + 1);
  CLI::App app{
      "Will it fit, on which GPU, how long, how much: memory, time and cost of a job over the catalog",
      "plan"};
  PlanFlags f;
  app.add_option("--model", f.model,
                 "built-in model (llama-3.2-1b, qwen3-8b, gpt2-xl, ...), a Hugging Face config.json or model "
                 "folder, or a Hub id (org/name) in the local Hugging Face cache");
  app.add_option("--params", f.params, "parameter count (7e9, 7B) when the model is not in the table");
  app.add_option("--model-file", f.model_file, "TOML model description (keys as data/models.csv columns)");
  app.add_option("--layers", f.layers, "transformer layers");
  app.add_option("--hidden", f.hidden, "hidden size");
  app.add_option("--heads", f.heads, "attention heads");
  app.add_option("--kv-heads", f.kv_heads, "key/value heads (grouped-query attention)");
  app.add_option("--ffn", f.ffn, "MLP inner size");
  app.add_option("--vocab", f.vocab, "vocabulary size");
  app.add_option("--task", f.task, "train, finetune (full), lora or inference")->capture_default_str();
  app.add_option("--tokens", f.tokens,
                 "training tokens (inference: generated tokens), e.g. 2e9; without it: memory and fit only");
  app.add_option("--seq", f.seq, "sequence length (inference: context = prompt + output)");
  app.add_option("--batch", f.batch, "micro-batch per GPU (inference: concurrent sequences per replica)");
  app.add_option(
      "--prompt-tokens", f.prompt_tokens,
      "inference: prompt length of each request (default: " + plan::default_rule("prompt-tokens") + ")");
  app.add_option("--precision", f.precision,
                 "fp32, bf16, fp16 or mixed (default: " + plan::default_rule("precision") + ")");
  app.add_option("--optimizer", f.optimizer,
                 "adamw, adam8bit or sgd (momentum) (default: " + plan::default_rule("optimizer") + ")");
  app.add_option("--dp", f.dp, "data-parallel degree");
  app.add_option("--zero", f.zero, "ZeRO stage 0..3 over --dp (default: " + plan::default_rule("zero") + ")");
  app.add_flag("--fsdp", f.fsdp, "FSDP full sharding (as ZeRO-3)");
  app.add_option("--tp", f.tp, "tensor-parallel degree");
  app.add_option("--pp", f.pp, "pipeline-parallel degree");
  app.add_option("--recompute", f.recompute, "activation recompute: none, selective or full");
  app.add_option("--attention", f.attention,
                 "attention implementation: eager (keeps the score matrix), sdpa or flash (default sdpa)");
  app.add_flag("--keep-logits", f.keep_logits,
               "the training loop holds the logits through backward (outputs = model(...); "
               "outputs.loss.backward())");
  app.add_option("--lora-rank", f.lora_rank, "LoRA rank (default " + plan::default_rule("lora-rank") + ")");
  app.add_flag("--qlora", f.qlora, "QLoRA: 4-bit NF4 frozen base, adapters trained");
  app.add_option("--gpu", f.gpu, "only this GPU model (H100, A100-80GB, L4, ...)");
  app.add_option("--gpus", f.gpus, "total GPUs (default: " + plan::default_rule("gpus") + ")");
  app.add_option("--mfu", f.mfu,
                 "model FLOPs utilization, e.g. 0.4 (default " + plan::default_rule("mfu") + ")");
  app.add_flag("--spot", f.spot, "spot prices, with interruptions, checkpoints and restarts");
  app.add_option(
      "--interruption-rate", f.interruption_rate,
      "spot interruptions per instance-hour (default " + plan::default_rule("interruption-rate") + ")");
  app.add_option("--checkpoint-s", f.checkpoint_s,
                 "seconds to write one checkpoint (default: " + plan::default_rule("checkpoint-s") + ")");
  app.add_option("--restart-s", f.restart_s,
                 "seconds to get capacity back and reload after an interruption (default " +
                     plan::default_rule("restart-s") + ")");
  app.add_option("--optimize", f.optimize,
                 "rank by cost, time or score (default: " + plan::default_rule("optimize") + ")");
  app.add_option("--weights", f.weights,
                 "score weights, e.g. cost=0.3,perf=0.3,memory=0.2,risk=0.1,carbon=0.1");
  app.add_option("--top", f.top, "options shown in the table")->capture_default_str();
  app.add_option("--catalog", f.catalog_file, "offers CSV merged over the built-in catalog");
  app.add_flag("--json", f.json, "machine-readable output");
  app.add_flag("--list-models", f.list_models, "print the built-in model table and exit");
  app.footer("Subcommand: gpumeter plan tco --gpu NAME --capex-usd N [...]  (own hardware vs cloud)");
  if (auto rc = parse_args(app, argc, argv)) {
    // `plan --help` shows the other mode too: `plan tco`.
    if (*rc == util::kExitOk && help_requested(argc, argv))
      return print_mode_help("gpumeter plan tco: own hardware vs cloud", run_tco, {"tco", "--help"});
    return *rc;
  }
  if (f.list_models) {
    std::fputs(report::render_model_list(f.json).c_str(), stdout);
    return util::kExitOk;
  }

  auto req = plan::request_from_settings(f);
  if (!req) return fail(kCmd, req.error());
  auto catalog = catalog::load_catalog(f.catalog_file);
  if (!catalog) return fail(kCmd, catalog.error());
  if (f.gpu) {
    const catalog::GpuSpec* g = catalog->find_gpu(*f.gpu);
    if (!g) {
      const std::string close = catalog->suggest_gpu(*f.gpu);
      return fail(kCmd, make_error(ErrorKind::not_found,
                                   fmt::format("--gpu: unknown GPU '{}'{}", *f.gpu,
                                               close.empty() ? "" : " (did you mean: " + close + "?)")));
    }
    req->gpu = g->id;
  }
  auto result = plan::make_plan(*req, plan::offers_from_catalog(*catalog));
  if (!result) return fail(kCmd, result.error());
  plan::add_default_assumptions(*result, plan::given_settings(f));
  const std::string out = f.json ? report::render_plan_json(*result, req->objective)
                                 : report::render_plan_text(*result, f.top, req->objective);
  std::fputs(out.c_str(), stdout);
  return util::kExitOk;
}

int plan_demo_section(std::FILE* out) {
  auto text = report::render_plan_demo();
  if (!text) {
    std::fprintf(out, "plan: %s\n", text.error().message.c_str());
    return util::kExitFailure;
  }
  std::fputs(text->c_str(), out);
  return util::kExitOk;
}

}  // namespace gm::cli
