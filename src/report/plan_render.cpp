#include "report/plan_render.h"

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>

#include "meter/meter.h"
#include "util/json.h"
#include "util/table.h"
#include "util/units.h"

namespace gm::report {

using util::json_or_null;

namespace {

using plan::PlanOption;
using plan::PlanResult;

std::string gb(double bytes) {
  return fmt::format("{:.1f} GB", bytes / 1e9);
}

std::string si(double v) {
  // 999.9M prints as 1B, not 1e+03M.
  if (v >= 0.9995e12) return fmt::format("{:.3g}T", v / 1e12);
  if (v >= 0.9995e9) return fmt::format("{:.3g}B", v / 1e9);
  if (v >= 0.9995e6) return fmt::format("{:.3g}M", v / 1e6);
  return fmt::format("{:.3g}", v);
}

std::string hours(double h) {
  if (!std::isfinite(h)) return "never";
  return util::format_duration_s(h * 3600.0);
}

std::string parallel_text(const plan::Parallelism& p) {
  std::string s = fmt::format("dp {}", p.dp);
  if (p.tp > 1) s += fmt::format(", tp {}{}", p.tp, p.sp ? "+sp" : "");
  if (p.pp > 1) s += fmt::format(", pp {}", p.pp);
  if (p.zero > 0) s += fmt::format(", ZeRO-{}", p.zero);
  return s;
}

std::string option_place(const PlanOption& o) {
  return fmt::format("{} {} in {} ({}{}× {}){}", o.provider, o.instance, o.region,
                     o.instances > 1 ? fmt::format("{} instances × ", o.instances) : "", o.gpus_per_instance,
                     o.gpu, o.spot ? " spot" : " on-demand");
}

nlohmann::json finite(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

nlohmann::json finite(const std::optional<double>& v) {
  return v ? finite(*v) : nlohmann::json(nullptr);
}

constexpr const char* kGiveTokens = "give --tokens";

std::string hours_or_hint(const std::optional<double>& h) {
  return h ? hours(*h) : kGiveTokens;
}

std::string cost_or_hint(const std::optional<double>& usd) {
  if (!usd) return kGiveTokens;
  return std::isfinite(*usd) ? util::format_usd(*usd) : "-";
}

nlohmann::json terms_json(const std::vector<plan::MemoryTerm>& terms) {
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& t : terms) arr.push_back({{"name", t.name}, {"bytes", t.bytes}});
  return arr;
}

nlohmann::json memory_json(const plan::MemoryBreakdown& m) {
  return {{"weights_bytes", m.weights_bytes},
          {"gradients_bytes", m.gradients_bytes},
          {"optimizer_bytes", m.optimizer_bytes},
          {"activations_bytes",
           m.activations_known ? nlohmann::json(m.activations_bytes) : nlohmann::json(nullptr)},
          {"kv_cache_bytes", m.kv_cache_bytes},
          {"weight_copies_bytes", m.weight_copies_bytes},
          {"peak_bytes", m.peak_bytes},
          {"peak",
           {{"phase", m.peak.phase},
            {"bytes", m.peak.bytes},
            {"terms", terms_json(m.peak.terms)},
            {"phases", terms_json(m.peak.phases)}}},
          {"overhead_bytes", m.overhead_bytes},
          {"total_bytes", m.total_bytes},
          {"trainable_params", m.trainable_params}};
}

nlohmann::json parallel_json(const plan::Parallelism& p) {
  return {{"dp", p.dp},      {"tp", p.tp}, {"pp", p.pp}, {"zero", p.zero}, {"sequence_parallel", p.sp},
          {"gpus", p.gpus()}};
}

std::string_view objective_name(plan::Objective o) {
  switch (o) {
    case plan::Objective::cost:
      return "cost";
    case plan::Objective::time:
      return "time";
    case plan::Objective::score:
      return "score";
  }
  return "cost";
}

}  // namespace

std::string plan_recommendation(const PlanResult& r) {
  if (r.options.empty() || !r.options.front().fits) {
    std::string why = "Nothing in the catalog fits this job";
    if (!r.verdicts.empty())
      why += fmt::format(" (needs {} per GPU in the smallest configuration)", gb(r.memory.total_bytes));
    return why +
           ": try --recompute full, --tp, --zero 3, a smaller --batch or --seq, --qlora, or --task lora.";
  }
  const PlanOption& o = r.options.front();
  if (!o.time_h)
    return fmt::format(
        "Cheapest that fits: {} at {}/h; {} of {} per GPU ({}). Give --tokens for time and cost.",
        option_place(o), util::format_usd(o.usd_per_hour), gb(o.memory.total_bytes), gb(o.gpu_memory_bytes),
        parallel_text(o.parallel));
  std::string line =
      fmt::format("Recommended: {}: {}, {}", option_place(o), hours(*o.time_h), cost_or_hint(o.cost_usd));
  if (o.usd_per_million_tokens)
    line += fmt::format(" ({} per 1M tokens)", util::format_usd(*o.usd_per_million_tokens));
  line += fmt::format("; {} of {} per GPU ({}).", gb(o.memory.total_bytes), gb(o.gpu_memory_bytes),
                      parallel_text(o.parallel));
  return line;
}

std::string render_plan_text(const PlanResult& r, std::size_t top, plan::Objective objective, bool brief) {
  const plan::JobSpec& j = r.job;
  const plan::ModelSpec& m = j.model;
  std::string out;
  out += fmt::format(
      "{} ({} params{}) · {} · {} · seq {} · batch {} · {} · {}{}\n", m.name, si(m.params),
      m.active_params < m.params ? fmt::format(", {} active", si(m.active_params)) : "",
      plan::task_name(j.task), j.tokens ? si(*j.tokens) + " tokens" : std::string("no --tokens"), j.seq,
      j.batch, plan::precision_name(j.precision),
      j.task == plan::Task::inference
          ? "inference"
          : fmt::format("{} · recompute {} · attention {}", plan::optimizer_name(j.optimizer),
                        plan::recompute_name(j.recompute), plan::attention_name(j.attention)),
      plan::uses_adapters(j) ? fmt::format(" · {} rank {}", j.qlora ? "QLoRA" : "LoRA", j.lora_rank) : "");
  const plan::MemoryBreakdown& mem = r.memory;
  out += fmt::format("\nMemory per GPU ({}): {} total\n", parallel_text(r.parallel), gb(mem.total_bytes));
  out += fmt::format(
      "  weights {}  gradients {}  optimizer {} ({})  activations {}  KV cache {}  "
      "overhead {}\n",
      gb(mem.weights_bytes), gb(mem.gradients_bytes), gb(mem.optimizer_bytes),
      j.precision == plan::Precision::mixed && r.parallel.zero >= 1 && !plan::uses_adapters(j)
          ? "fp32 master + states"
          : "states",
      mem.activations_known ? gb(mem.activations_bytes) : std::string("unknown"), gb(mem.kv_cache_bytes),
      gb(mem.overhead_bytes));
  if (!mem.peak.phase.empty()) {
    std::string live;
    for (const auto& t : mem.peak.terms)
      if (t.bytes > 0) live += fmt::format("{}{} {}", live.empty() ? "" : " + ", t.name, gb(t.bytes));
    out += fmt::format("  peak {} at the {}: {}\n", gb(mem.peak.bytes), mem.peak.phase, live);
  }
  if (r.compute)
    out += fmt::format("Compute: {:.3g} FLOPs (model){}\n", r.compute->model_flops,
                       r.compute->hardware_flops > r.compute->model_flops
                           ? fmt::format(", {:.3g} with recomputation", r.compute->hardware_flops)
                           : "");
  else
    out += "Compute: give --tokens for FLOPs, time and cost\n";

  util::TextTable verdicts;
  using A = util::TextTable::Align;
  verdicts.header({"GPU", "memory", "fewest GPUs", "per GPU", "headroom", "fits"},
                  {A::left, A::right, A::right, A::right, A::right, A::left});
  for (const auto& v : r.verdicts)
    verdicts.row({v.gpu, gb(v.memory_bytes), std::to_string(v.parallel.gpus()), gb(v.memory.total_bytes),
                  gb(v.headroom_bytes), v.fits ? "yes" : "no"});
  if (!brief) out += "\nGPU verdicts\n" + verdicts.render();

  util::TextTable t;
  t.header(
      {"#", "provider", "region", "instance", "GPUs", "$/h", "time", "cost", "$/1M tok", "score", "fits"},
      {A::right, A::left, A::left, A::left, A::right, A::right, A::right, A::right, A::right, A::right,
       A::left});
  std::size_t shown = 0;
  for (const auto& o : r.options) {
    if (shown == top) break;
    ++shown;
    t.row({std::to_string(shown), o.provider, o.region, o.instance,
           fmt::format("{}{}× {}", o.instances > 1 ? fmt::format("{}×", o.instances) : "",
                       o.gpus_per_instance, o.gpu),
           util::format_usd(o.usd_per_hour), hours_or_hint(o.time_h), cost_or_hint(o.cost_usd),
           o.usd_per_million_tokens ? util::format_usd(*o.usd_per_million_tokens) : "-",
           o.time_h ? fmt::format("{:.2f}", o.score.total) : "-",
           std::string(o.fits ? "yes" : "no") +
               (o.flags.empty() ? "" : " (flagged: " + o.flags.front() + ")")});
  }
  out += fmt::format("\nOptions by {} ({}, top {} of {})\n", objective_name(objective),
                     r.options.empty() || !r.options.front().spot ? "on-demand" : "spot, expected", shown,
                     r.options.size());
  out += r.options.empty() ? std::string("  none\n") : t.render();
  if (!r.options.empty() && r.options.front().spot_detail) {
    const auto& s = *r.options.front().spot_detail;
    out += fmt::format(
        "Spot (first option): MTBI {}, checkpoint every {} (Young/Daly), {:.2f} interruptions expected, "
        "{} restarts, {} redone, {} writing checkpoints{}\n",
        hours(s.mtbi_s / 3600.0), hours(s.interval_s / 3600.0), s.expected_interruptions,
        hours(s.restart_overhead_s / 3600.0), hours(s.redone_s / 3600.0),
        hours(s.checkpoint_overhead_s / 3600.0),
        s.checkpoint_on_notice ? " (the interruption notice leaves time for a final checkpoint)" : "");
  }
  out += "\n" + plan_recommendation(r) + "\n";
  if (brief) return out;
  out += "\nAssumptions\n";
  for (const auto& a : r.assumptions) out += fmt::format("  {} = {}  ({})\n", a.key, a.value, a.source);
  for (const auto& n : r.notes) out += fmt::format("Note: {}\n", n);
  return out;
}

std::string render_plan_json(const PlanResult& r, plan::Objective objective) {
  const plan::JobSpec& j = r.job;
  const plan::ModelSpec& m = j.model;
  nlohmann::json model = {{"name", m.name},     {"arch", plan::arch_name(m.arch)},
                          {"family", m.family}, {"head_dim", m.head_dim()},
                          {"params", m.params}, {"active_params", m.active_params},
                          {"layers", m.layers}, {"hidden", m.hidden},
                          {"heads", m.heads},   {"kv_heads", m.kv_heads},
                          {"ffn", m.ffn},       {"vocab", m.vocab},
                          {"source", m.source}};
  nlohmann::json options = nlohmann::json::array();
  for (const auto& o : r.options) {
    nlohmann::json spot = nullptr;
    if (o.spot_detail) {
      const auto& s = *o.spot_detail;
      spot = {{"feasible", s.feasible},
              {"interruptions_per_hour", o.interruptions_per_hour},
              {"mtbi_s", finite(s.mtbi_s)},
              {"checkpoint_interval_s", finite(s.interval_s)},
              {"expected_interruptions", s.expected_interruptions},
              {"checkpoint_overhead_s", s.checkpoint_overhead_s},
              {"restart_overhead_s", s.restart_overhead_s},
              {"redone_s", s.redone_s},
              {"checkpoint_on_notice", s.checkpoint_on_notice}};
    }
    options.push_back({{"provider", o.provider},
                       {"region", o.region},
                       {"instance", o.instance},
                       {"gpu", o.gpu},
                       {"gpus_per_instance", o.gpus_per_instance},
                       {"instances", o.instances},
                       {"fits", o.fits},
                       {"time_h", finite(o.time_h)},
                       {"cost_usd", finite(o.cost_usd)},
                       {"spot", o.spot},
                       {"usd_per_million_tokens", json_or_null(o.usd_per_million_tokens)},
                       {"score", o.time_h ? nlohmann::json(o.score.total) : nlohmann::json(nullptr)},
                       {"score_breakdown", o.time_h ? nlohmann::json{{"cost", o.score.cost},
                                                                     {"perf", o.score.perf},
                                                                     {"memory", o.score.memory},
                                                                     {"risk", o.score.risk},
                                                                     {"carbon", json_or_null(o.score.carbon)}}
                                                    : nlohmann::json(nullptr)},
                       {"billed_h", finite(o.billed_h)},
                       {"usd_per_hour", o.usd_per_hour},
                       {"parallel", parallel_json(o.parallel)},
                       {"memory_total_bytes", o.memory.total_bytes},
                       {"gpu_memory_bytes", o.gpu_memory_bytes},
                       {"headroom_bytes", o.headroom_bytes},
                       {"bound", o.bound},
                       {"energy_kwh", json_or_null(o.energy_kwh)},
                       {"carbon_kg", json_or_null(o.carbon_kg)},
                       {"carbon_dataset", o.carbon_dataset.empty() ? nlohmann::json(nullptr)
                                                                   : nlohmann::json(o.carbon_dataset)},
                       {"spot_detail", spot},
                       {"flags", o.flags}});
  }
  nlohmann::json verdicts = nlohmann::json::array();
  for (const auto& v : r.verdicts)
    verdicts.push_back({{"gpu", v.gpu},
                        {"gpu_memory_bytes", v.memory_bytes},
                        {"fits", v.fits},
                        {"headroom_bytes", v.headroom_bytes},
                        {"parallel", parallel_json(v.parallel)},
                        {"total_bytes", v.memory.total_bytes}});
  nlohmann::json assumptions = nlohmann::json::object();
  for (const auto& a : r.assumptions) assumptions[a.key] = {{"value", a.value}, {"source", a.source}};
  nlohmann::json doc = {
      {"model", model},
      {"task", plan::task_name(j.task)},
      {"tokens", json_or_null(j.tokens)},
      {"seq", j.seq},
      {"batch", j.batch},
      {"precision", plan::precision_name(j.precision)},
      {"optimizer", plan::optimizer_name(j.optimizer)},
      {"recompute", plan::recompute_name(j.recompute)},
      {"attention", plan::attention_name(j.attention)},
      {"keep_logits", j.keep_logits},
      {"lora_rank", plan::uses_adapters(j) ? nlohmann::json(j.lora_rank) : nlohmann::json(nullptr)},
      {"qlora", j.qlora},
      {"parallel", parallel_json(r.parallel)},
      {"memory", memory_json(r.memory)},
      {"compute_flops", r.compute ? nlohmann::json(r.compute->model_flops) : nlohmann::json(nullptr)},
      {"hardware_flops", r.compute ? nlohmann::json(r.compute->hardware_flops) : nlohmann::json(nullptr)},
      {"attention_flops", r.compute ? nlohmann::json(r.compute->attention_flops) : nlohmann::json(nullptr)},
      {"optimize", objective_name(objective)},
      {"verdicts", verdicts},
      {"options", options},
      {"recommendation", plan_recommendation(r)},
      {"assumptions", assumptions},
      {"notes", r.notes}};
  return doc.dump(2) + "\n";
}

std::string render_model_list(bool json) {
  const auto& models = plan::builtin_models();
  if (json) {
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& m : models)
      arr.push_back({{"name", m.name},
                     {"arch", plan::arch_name(m.arch)},
                     {"params", m.params},
                     {"active_params", m.active_params},
                     {"layers", m.layers},
                     {"hidden", m.hidden},
                     {"heads", m.heads},
                     {"kv_heads", m.kv_heads},
                     {"ffn", m.ffn},
                     {"vocab", m.vocab},
                     {"seq", m.seq},
                     {"family", m.family},
                     {"head_dim", m.head_dim()},
                     {"experts", m.experts},
                     {"experts_per_token", m.experts_per_token},
                     {"source", m.source}});
    return arr.dump(2) + "\n";
  }
  std::string out = fmt::format("{:<22} {:<19} {:>8} {:>8} {:>6} {:>6} {:>5} {:>3} {:>6} {:>7} {:>6}  {}\n",
                                "model", "arch", "params", "active", "layers", "hidden", "heads", "kv", "ffn",
                                "vocab", "seq", "source");
  for (const auto& m : models)
    out += fmt::format("{:<22} {:<19} {:>8} {:>8} {:>6} {:>6} {:>5} {:>3} {:>6} {:>7} {:>6}  {}\n", m.name,
                       plan::arch_name(m.arch), si(m.params), si(m.active_params), m.layers, m.hidden,
                       m.heads, m.kv_heads, m.ffn, m.vocab, m.seq, m.source);
  return out;
}

std::string render_tco(const plan::TcoInput& in, const plan::TcoResult& r, bool json) {
  if (json) {
    nlohmann::json doc = {{"inputs",
                           {{"gpu", in.gpu},
                            {"gpus", in.gpus},
                            {"years", in.years},
                            {"capex_usd", in.capex_usd},
                            {"gpu_power_w", in.gpu_power_w},
                            {"host_power_w", in.host_power_w},
                            {"idle_power_fraction", in.idle_power_fraction},
                            {"pue", in.pue},
                            {"usd_per_kwh", in.usd_per_kwh},
                            {"ops_usd_per_year", in.ops_usd_per_year},
                            {"utilization", in.utilization},
                            {"cloud_usd_per_gpu_hour", in.cloud_usd_per_gpu_hour},
                            {"cloud_source", in.cloud_source}}},
                          {"hours", r.hours},
                          {"own",
                           {{"energy_kwh", r.own_energy_kwh},
                            {"energy_usd", r.own_energy_usd},
                            {"ops_usd", r.own_ops_usd},
                            {"capex_usd", in.capex_usd},
                            {"total_usd", r.own_total_usd},
                            {"usd_per_used_gpu_hour", r.own_usd_per_used_gpu_hour}}},
                          {"cloud", {{"gpu_hours", r.cloud_gpu_hours}, {"total_usd", r.cloud_total_usd}}},
                          {"break_even_utilization", json_or_null(r.break_even_utilization)},
                          {"cheaper", r.own_total_usd < r.cloud_total_usd ? "own" : "cloud"}};
    return doc.dump(2) + "\n";
  }
  std::string out = fmt::format("Own {}× {} vs cloud over {:g} years at {:.0f} % utilization\n\nInputs\n",
                                in.gpus, in.gpu, in.years, in.utilization * 100);
  out += fmt::format("  capex                 {}\n", util::format_usd(in.capex_usd));
  out +=
      fmt::format("  GPU power             {:.0f} W each; host {:.0f} W; idle draw {:.0f} % of full load\n",
                  in.gpu_power_w, in.host_power_w, in.idle_power_fraction * 100);
  out += fmt::format("  PUE × electricity     {:.2f} × ${:.3f}/kWh\n", in.pue, in.usd_per_kwh);
  out += fmt::format("  operations            {} per year\n", util::format_usd(in.ops_usd_per_year));
  out += fmt::format("  cloud price           ${:.4f} per GPU-hour ({})\n", in.cloud_usd_per_gpu_hour,
                     in.cloud_source);
  out += fmt::format(
      "\nOwn:   {} = capex {} + energy {} ({:.0f} kWh) + operations {}; {} per used GPU-hour\n",
      util::format_usd(r.own_total_usd), util::format_usd(in.capex_usd), util::format_usd(r.own_energy_usd),
      r.own_energy_kwh, util::format_usd(r.own_ops_usd), util::format_usd(r.own_usd_per_used_gpu_hour));
  out += fmt::format("Cloud: {} = {:.0f} GPU-hours × ${:.4f}\n", util::format_usd(r.cloud_total_usd),
                     r.cloud_gpu_hours, in.cloud_usd_per_gpu_hour);
  out += r.break_even_utilization
             ? fmt::format("Break-even utilization: {:.1f} % (owning is cheaper above it)\n",
                           *r.break_even_utilization * 100)
             : std::string("Break-even utilization: none (the cloud is cheaper even at 100 % use)\n");
  out += fmt::format("At {:.0f} %: {} is cheaper by {}.\n", in.utilization * 100,
                     r.own_total_usd < r.cloud_total_usd ? "owning" : "the cloud",
                     util::format_usd(meter::usd_gap(r.own_total_usd, r.cloud_total_usd)));
  out += fmt::format(
      "To meter runs on these GPUs at this cost: [pricing] onprem_usd_per_gpu_hour = {:.4f} in the config "
      "file (docs/catalog.md).\n",
      r.own_usd_per_used_gpu_hour);
  return out;
}

Result<std::string> render_plan_demo() {
  plan::PlanRequest req;
  auto model = plan::find_model("llama-3-8b");
  if (!model) return model.error();
  req.job.model = *model;
  req.job.task = plan::Task::lora;
  req.job.tokens = 2e9;
  req.job = plan::resolve_job_defaults(req.job, false, false, false);
  auto catalog = catalog::Catalog::builtin();
  if (!catalog) return catalog.error();
  auto result = plan::make_plan(req, plan::offers_from_catalog(*catalog));
  if (!result) return result.error();
  return "$ gpumeter plan --model llama-3-8b --task lora --tokens 2e9 --top 3\n" +
         render_plan_text(*result, 3, req.objective, /*brief=*/true);
}

}  // namespace gm::report
