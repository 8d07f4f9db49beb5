#include "report/run_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "cloud/cloud.h"
#include "guard/session.h"
#include "report/detail/run_activity.h"
#include "report/detail/target_render.h"
#include "sys/spawn.h"
#include "util/json.h"
#include "util/units.h"

namespace gm::report {

using util::json_or_null;
namespace {

std::optional<RightsizingHint> rightsize(const store::RunRecord& run,
                                         const std::vector<meter::GpuUsage>& gpus,
                                         const catalog::Catalog& catalog) {
  std::optional<std::uint64_t> peak;
  for (const auto& g : gpus)
    if (g.used && g.mem_peak_bytes) peak = std::max(peak.value_or(0), *g.mem_peak_bytes);
  if (!peak || *peak == 0 || run.price_micros_per_gpu_hour <= 0) return std::nullopt;
  const double need = static_cast<double>(*peak) * (1.0 + kRightsizingHeadroom);
  // Like for like: the candidate's catalog reference price against the reference price of the run's own GPU
  // (the run may be priced far from the catalog, e.g. a chargeback rate, which says nothing about the
  // size of GPU it needs); the run's price only when the catalog has no price for its GPU.
  const catalog::GpuSpec* current = catalog.find_gpu(run.gpu_model);
  const auto current_ref = current ? catalog.reference_price(current->id) : std::nullopt;
  const bool by_reference = current_ref && current_ref->usd_per_gpu_hour > 0;
  const double basis =
      by_reference ? current_ref->usd_per_gpu_hour : util::micros_to_usd(run.price_micros_per_gpu_hour);
  std::optional<RightsizingHint> best;
  for (const auto& spec : catalog.gpus()) {
    if (static_cast<double>(spec.memory_bytes) < need) continue;
    auto ref = catalog.reference_price(spec.id);
    if (!ref || ref->usd_per_gpu_hour <= 0 || ref->usd_per_gpu_hour >= basis) continue;
    if (current && current->id == spec.id) continue;
    if (!best || ref->usd_per_gpu_hour < best->usd_per_gpu_hour) {
      RightsizingHint h;
      h.gpu = spec.id;
      h.usd_per_gpu_hour = ref->usd_per_gpu_hour;
      h.price_ratio = meter::usd_ratio(ref->usd_per_gpu_hour, basis);
      h.price_basis = by_reference ? fmt::format("catalog reference prices: {} against {} for the {}",
                                                 util::format_usd(ref->usd_per_gpu_hour),
                                                 util::format_usd(current_ref->usd_per_gpu_hour), current->id)
                                   : fmt::format(
                                         "its catalog reference price {} against this run's price {} "
                                         "(the catalog has no price for this run's GPU)",
                                         util::format_usd(ref->usd_per_gpu_hour), util::format_usd(basis));
      h.peak_bytes = *peak;
      h.gpu_memory_bytes = spec.memory_bytes;
      if (current && current->bf16_dense_tflops && spec.bf16_dense_tflops && *spec.bf16_dense_tflops > 0) {
        const double slow = *current->bf16_dense_tflops / *spec.bf16_dense_tflops;
        h.assumption = fmt::format(
            "if the job is compute-bound it may run up to {:.1f}x longer (bf16 dense TFLOPS {} vs {}); it "
            "pays off "
            "when it runs less than {:.1f}x longer",
            slow, *spec.bf16_dense_tflops, *current->bf16_dense_tflops, 1.0 / h.price_ratio);
      } else {
        h.assumption =
            fmt::format("assumes the same run time; it pays off when the job runs less than {:.1f}x longer",
                        1.0 / h.price_ratio);
      }
      best = h;
    }
  }
  return best;
}

}  // namespace

RunReport build_run_report(const store::RunRecord& run, std::vector<meter::GpuUsage> gpus,
                           const std::vector<store::ProgressRecord>& progress,
                           std::vector<store::ActionRecord> actions, const catalog::Catalog* catalog,
                           const std::vector<store::InferenceRecord>& inference) {
  RunReport r;
  r.run = run;
  r.gpus = std::move(gpus);
  r.actions = std::move(actions);
  // How the job was matched to its GPUs is kept with the actions (ActionKind::gpu_match): a note of the
  // report.
  for (const auto& a : r.actions)
    if (a.kind == store::ActionKind::gpu_match) r.notes.push_back(a.message);
  std::erase_if(r.actions,
                [](const store::ActionRecord& a) { return a.kind == store::ActionKind::gpu_match; });
  r.wall_s = static_cast<double>(run.wall_ms) / 1000.0;
  MicroUsd idle = 0;
  double busy_s = 0;
  for (const auto& g : r.gpus) {
    if (g.used) idle += g.idle_cost_micros;
    busy_s += g.busy_s;
  }
  r.idle_cost_usd = util::micros_to_usd(idle);
  r.unused_gpu_cost_usd = util::micros_to_usd(run.unused_gpu_cost_micros);
  if (run.wall_ms > 0 && !run.gpus_allocated.empty() &&
      std::any_of(r.gpus.begin(), r.gpus.end(),
                  [](const meter::GpuUsage& g) { return g.util_avg_pct.has_value(); }))
    r.effective_utilization = busy_s / (r.wall_s * static_cast<double>(run.gpus_allocated.size()));
  for (const auto& p : progress) {
    for (const auto& [k, v] : p.metrics) r.metrics[k] = v;
    if (p.step) r.steps = std::max(r.steps.value_or(0), *p.step);
    if (p.total_steps) r.total_steps = p.total_steps;
    if (p.samples) r.samples = std::max(r.samples.value_or(0), *p.samples);
    if (p.tokens) r.tokens = std::max(r.tokens.value_or(0), *p.tokens);
  }
  if (!r.total_steps) r.total_steps = run.total_steps;
  // A run without GPU telemetry has no allocated GPU and no GPU model (DESIGN §3 "No GPU telemetry").
  if (run.gpus_allocated.empty() && run.gpu_model.empty()) r.telemetry = "none";
  if (r.telemetry == "none")
    r.notes.push_back(run.price_source == "none" ? "no GPU telemetry and no price: time only"
                                                 : "no GPU telemetry: cost is wall time × the price");
  const double cost_usd = util::micros_to_usd(run.cost_micros);
  if (r.steps && *r.steps > 0) r.usd_per_step = meter::usd_ratio(cost_usd, static_cast<double>(*r.steps));
  if (r.samples && *r.samples > 0)
    r.usd_per_1k_samples = meter::usd_per_1k(cost_usd, static_cast<double>(*r.samples));
  if (r.tokens && *r.tokens > 0)
    r.usd_per_1m_tokens = meter::usd_per_million(cost_usd, static_cast<double>(*r.tokens));
  const auto first_step = first_step_ms(progress);
  if (r.telemetry != "none") {
    r.startup = run_startup(run, r.gpus, r.steps, r.total_steps, first_step);
    r.process_on_gpu_ms = process_on_gpu_ms(r.gpus);
  }
  // Steady state: the job's GPUs did work or it made a step. A run that ended (or is still running) before
  // either is all start-up: its utilization and memory so far say nothing about the job's steady state.
  const bool reached = r.startup.has_value() || first_step.has_value();
  const bool ended_early =
      run.status == store::RunStatus::stopped || run.status == store::RunStatus::failed ||
      run.status == store::RunStatus::interrupted || run.status == store::RunStatus::preempted ||
      run.status == store::RunStatus::running ||
      (run.status == store::RunStatus::finished && run.exit_code.value_or(0) != 0);
  if (r.telemetry != "none" || first_step) r.steady_state = reached || !ended_early;
  if (r.steady_state == false) {
    r.notes.push_back(fmt::format(
        "the run {} before its first progress step and before its GPUs did work (utilization under {:.0f}%): "
        "its utilization and memory are start-up only; utilization findings, rightsizing and per-month "
        "figures are withheld",
        run.status == store::RunStatus::running ? "is still" : "ended", meter::kIdleUtilPct));
  } else if (catalog) {
    r.rightsizing = rightsize(run, r.gpus, *catalog);
  }
  detail::add_run_mfu(r, catalog);
  r.serving = serving_kpis(run, inference);
  if (r.serving && catalog != nullptr) add_plan_prediction(*r.serving, run, *catalog);
  if (run.status == store::RunStatus::interrupted)
    r.notes.push_back(
        "gpumeter stopped recording this run (killed or crashed): figures are as of its last committed "
        "second");
  if (!run.co2_kg) r.notes.push_back("CO2 not estimated: no provider/region known for the grid intensity");
  r.target = replay_run_target(run, progress, r.actions);
  r.findings = run_findings(r);
  detail::add_gpm_findings(r, catalog);
  return r;
}

RunReport session_report(const guard::SessionOutcome& outcome, const catalog::Catalog* catalog) {
  RunReport r = build_run_report(outcome.run, outcome.gpus, outcome.progress, outcome.actions, catalog,
                                 outcome.inference);
  r.cells = outcome.cells;
  if (outcome.target) r.target = outcome.target;  // the live forecast and its whole history
  return r;
}

Result<RunReport> load_run_report(const store::Ledger& ledger, std::int64_t run_id,
                                  const catalog::Catalog* catalog) {
  GM_TRY(auto run, ledger.run(run_id));
  GM_TRY(auto samples, ledger.samples(run_id));
  GM_TRY(auto progress, ledger.progress(run_id));
  GM_TRY(auto actions, ledger.actions(run_id));
  GM_TRY(auto inference, ledger.inference(run_id));
  auto usage = meter::gpu_usage_from_samples(samples);
  // Keep every allocated GPU in the list even before it had a sample.
  for (const auto& uuid : run.gpus_allocated)
    if (std::none_of(usage.begin(), usage.end(), [&](const meter::GpuUsage& g) { return g.uuid == uuid; })) {
      meter::GpuUsage g;
      g.uuid = uuid;
      usage.push_back(g);
    }
  if (run.status == store::RunStatus::interrupted && run.wall_ms == 0 && !samples.empty())
    run.wall_ms = samples.back().t_ms;
  GM_TRY(auto cells, ledger.cells(run_id));
  auto report = build_run_report(run, std::move(usage), progress, std::move(actions), catalog, inference);
  report.cells = std::move(cells);
  return report;
}

std::optional<std::int64_t> process_on_gpu_ms(const std::vector<meter::GpuUsage>& gpus) {
  std::optional<std::int64_t> first;
  for (const auto& g : gpus)
    if (g.first_process_ms) first = std::min(first.value_or(*g.first_process_ms), *g.first_process_ms);
  return first;
}

std::optional<std::int64_t> first_step_ms(const std::vector<store::ProgressRecord>& progress) {
  std::optional<std::int64_t> first;
  for (const auto& p : progress)
    if (p.step && *p.step > 0) first = std::min(first.value_or(p.t_ms), p.t_ms);
  return first;
}

std::optional<Startup> run_startup(const store::RunRecord& run, const std::vector<meter::GpuUsage>& gpus,
                                   std::optional<std::int64_t> steps, std::optional<std::int64_t> total_steps,
                                   std::optional<std::int64_t> first_step_ms) {
  if (run.price_micros_per_gpu_hour <= 0 || run.cost_micros <= 0 || run.gpus_allocated.empty())
    return std::nullopt;
  // Utilization on a GPU the job used (another tenant's work on a shared GPU is not the job's); when no GPU
  // was seen used (the job's processes not visible, as in some containers), on any allocated GPU.
  const bool any_used =
      std::any_of(gpus.begin(), gpus.end(), [](const meter::GpuUsage& g) { return g.used; });
  std::optional<std::int64_t> first = first_step_ms;
  for (const auto& g : gpus)
    if (g.first_busy_ms && (g.used || !any_used))
      first = std::min(first.value_or(*g.first_busy_ms), *g.first_busy_ms);
  if (!first) return std::nullopt;
  Startup s;
  s.ms = std::min(*first, run.wall_ms > 0 ? run.wall_ms : *first);
  const auto n = static_cast<std::int64_t>(run.gpus_allocated.size());
  s.cost_micros = std::min(run.cost_micros,
                           util::cost_for_ms(meter::micros_times(run.price_micros_per_gpu_hour, n), s.ms));
  s.share_of_run = meter::cost_share(s.cost_micros, run.cost_micros);
  if (run.forecast_cost_usd && *run.forecast_cost_usd > 0) {
    s.total_micros = std::max(run.cost_micros, util::usd_to_micros(*run.forecast_cost_usd));
  } else if (steps && total_steps && *steps > 0 && *total_steps > *steps) {
    // The steps so far cost what the run cost after its start-up; the rest of them cost the same per step.
    s.total_micros = meter::projected_total_micros(s.cost_micros, run.cost_micros, *steps, *total_steps);
  }
  if (s.total_micros && *s.total_micros > 0)
    s.share_of_total = meter::cost_share(s.cost_micros, *s.total_micros);
  return s;
}

std::string describe_status(const store::RunRecord& run) {
  if (run.status == store::RunStatus::preempted) {
    std::string s = "preempted";
    if (run.preemption_provider) {
      s += " (" + *run.preemption_provider + " notice";
      if (run.preemption_notice_unix_ms) s += " at " + cloud::format_iso8601(*run.preemption_notice_unix_ms);
      if (run.preemption_deadline_unix_ms)
        s += ", deadline " + cloud::format_iso8601(*run.preemption_deadline_unix_ms);
      s += ")";
    }
    return s;
  }
  if (run.status == store::RunStatus::stopped || run.stopped_by)
    return "stopped by " + run.stopped_by.value_or("gpumeter");
  if (run.status == store::RunStatus::running) return "running";
  // `gpumeter attach`: the process was not gpumeter's child, its exit status is unknown.
  if (run.status == store::RunStatus::detached)
    return "detached (gpumeter stopped watching; the process went on)";
  if (run.status == store::RunStatus::finished && !run.exit_code) return "ended";
  if (run.status == store::RunStatus::interrupted) {
    if (run.exit_code && *run.exit_code > 128)
      return "interrupted (" + sys::signal_name(*run.exit_code - 128) + ")";
    return run.exit_code ? "interrupted" : "interrupted (gpumeter stopped recording)";
  }
  // "finished" is how ledgers before issue 19 recorded every run that ended by itself.
  if (run.status == store::RunStatus::failed && run.exit_code &&
      (*run.exit_code == 126 || *run.exit_code == 127) && run.wall_ms == 0)
    return fmt::format("could not start (exit {})", *run.exit_code);
  if (!run.exit_code || *run.exit_code == 0) return "succeeded";
  return fmt::format("failed (exit {})", *run.exit_code);
}

std::string render_run_report_json(const RunReport& r) {
  nlohmann::json j;
  const store::RunRecord& run = r.run;
  j["run_id"] = run.id;
  j["command"] = run.command;
  j["status"] = util::text_of(run.status);
  j["status_text"] = describe_status(run);
  j["telemetry"] = r.telemetry;
  j["exit_code"] = json_or_null(run.exit_code);
  j["stopped_by"] = json_or_null(run.stopped_by);
  j["start_unix_ms"] = run.start_unix_ms;
  j["wall_s"] = r.wall_s;
  j["billed_s"] = run.billed_s;
  j["cost_usd"] = util::micros_to_usd(run.cost_micros);
  j["price_usd_per_gpu_hour"] = util::micros_to_usd(run.price_micros_per_gpu_hour);
  j["price_source"] = run.price_source;
  j["gpus_allocated"] = run.gpus_allocated;
  j["gpus_used"] = run.gpus_used;
  j["idle_cost_usd"] = r.idle_cost_usd;
  j["unused_gpu_cost_usd"] = r.unused_gpu_cost_usd;
  j["energy_kwh"] = run.energy_method == store::RunEnergyMethod::none ? nlohmann::json(nullptr)
                                                                      : nlohmann::json(run.energy_j / 3.6e6);
  j["energy_method"] = util::text_of(run.energy_method);
  j["co2_kg"] = json_or_null(run.co2_kg);
  j["co2_intensity_source"] =
      run.carbon_source.empty() ? nlohmann::json(nullptr) : nlohmann::json(run.carbon_source);
  j["steps"] = json_or_null(r.steps);
  j["total_steps"] = json_or_null(r.total_steps);
  j["samples"] = json_or_null(r.samples);
  j["tokens"] = json_or_null(r.tokens);
  j["forecast_cost_usd"] = json_or_null(run.forecast_cost_usd);
  j["budget_usd"] =
      run.budget_micros ? nlohmann::json(util::micros_to_usd(*run.budget_micros)) : nlohmann::json(nullptr);
  j["effective_utilization"] = json_or_null(r.effective_utilization);
  j["startup_s"] =
      r.startup ? nlohmann::json(static_cast<double>(r.startup->ms) / 1000) : nlohmann::json(nullptr);
  j["startup_cost_usd"] =
      r.startup ? nlohmann::json(util::micros_to_usd(r.startup->cost_micros)) : nlohmann::json(nullptr);
  j["process_on_gpu_s"] = r.process_on_gpu_ms
                              ? nlohmann::json(static_cast<double>(*r.process_on_gpu_ms) / 1000)
                              : nlohmann::json(nullptr);
  j["steady_state"] = json_or_null(r.steady_state);
  j["cost_per_step_usd"] = json_or_null(r.usd_per_step);
  j["usd_per_1k_samples"] = json_or_null(r.usd_per_1k_samples);
  j["usd_per_1m_tokens"] = json_or_null(r.usd_per_1m_tokens);
  j["mfu"] = json_or_null(r.mfu);
  j["flops_per_token"] = json_or_null(r.flops_per_token);
  j["mfu_basis"] = json_or_null(r.mfu_basis);
  j["metrics"] = r.metrics;
  j["labels"] = run.labels;
  j["user"] = run.user;
  j["host"] = run.host;
  nlohmann::json gpus = nlohmann::json::array();
  for (const auto& g : r.gpus) {
    gpus.push_back({{"index", g.index},
                    {"uuid", g.uuid},
                    {"used", g.used},
                    {"util_avg_pct", json_or_null(g.util_avg_pct)},
                    {"util_peak_pct", json_or_null(g.util_peak_pct)},
                    {"memory_avg_bytes", json_or_null(g.mem_avg_bytes)},
                    {"memory_peak_bytes", json_or_null(g.mem_peak_bytes)},
                    {"busy_s", g.busy_s},
                    {"cost_usd", util::micros_to_usd(g.cost_micros)},
                    {"energy_kwh", g.energy_j / 3.6e6}});
    detail::add_gpm_json(gpus.back(), g.activity.mean());
  }
  j["gpus"] = gpus;
  nlohmann::json actions = nlohmann::json::array();
  for (const auto& a : r.actions)
    actions.push_back({{"t_s", static_cast<double>(a.t_ms) / 1000.0},
                       {"kind", util::text_of(a.kind)},
                       {"cost_usd", util::micros_to_usd(a.cost_micros)},
                       {"message", a.message}});
  j["actions"] = actions;
  if (!r.cells.empty()) {
    nlohmann::json cells = nlohmann::json::array();
    for (const auto& c : r.cells)
      cells.push_back(
          {{"cell_id", c.cell_id},
           {"start_s", static_cast<double>(c.start_ms) / 1000.0},
           {"wall_s", static_cast<double>(c.end_ms - c.start_ms) / 1000.0},
           {"cost_usd", util::micros_to_usd(c.cost_micros)},
           {"util_pct", c.utilization_pct ? nlohmann::json(*c.utilization_pct) : nlohmann::json()},
           {"status", util::text_of(c.status)},
           {"source", c.source}});
    j["cells"] = cells;
  }
  if (r.rightsizing) {
    const auto& h = *r.rightsizing;
    j["rightsizing"] = {{"gpu", h.gpu},
                        {"usd_per_gpu_hour", h.usd_per_gpu_hour},
                        {"price_ratio", h.price_ratio},
                        {"price_basis", h.price_basis},
                        {"peak_memory_bytes", h.peak_bytes},
                        {"gpu_memory_bytes", h.gpu_memory_bytes},
                        {"assumption", h.assumption}};
  } else {
    j["rightsizing"] = nullptr;
  }
  if (r.serving) {
    const ServingKpis& k = *r.serving;
    j["serving"] = {
        {"engine", k.engine},
        {"models", k.models},
        {"prompt_tokens", json_or_null(k.prompt_tokens)},
        {"generated_tokens", json_or_null(k.generated_tokens)},
        {"cached_tokens", json_or_null(k.cached_tokens)},
        {"requests", json_or_null(k.requests)},
        {"usd_per_1m_prompt_tokens", json_or_null(k.usd_per_1m_prompt_tokens)},
        {"usd_per_1m_generated_tokens", json_or_null(k.usd_per_1m_generated_tokens)},
        {"usd_per_1m_tokens", json_or_null(k.usd_per_1m_tokens)},
        {"usd_per_1k_requests", json_or_null(k.usd_per_1k_requests)},
        {"generated_tokens_per_s", json_or_null(k.generated_tokens_per_s)},
        {"peak_generated_tokens_per_s", json_or_null(k.peak_generated_tokens_per_s)},
        {"load_ratio", json_or_null(k.load_ratio)},
        {"usd_per_1m_generated_tokens_at_peak", json_or_null(k.usd_per_1m_generated_tokens_at_peak)},
        {"plan_usd_per_1m_generated_tokens", json_or_null(k.plan_usd_per_1m_generated_tokens)},
        {"plan_model", json_or_null(k.plan_model)},
        {"plan_batch", json_or_null(k.plan_batch)},
        {"plan_note", k.plan_note.empty() ? nlohmann::json(nullptr) : nlohmann::json(k.plan_note)}};
  } else {
    j["serving"] = nullptr;
  }
  if (run.preemption_provider) {
    auto iso = [](const std::optional<std::int64_t>& ms) {
      return ms ? nlohmann::json(cloud::format_iso8601(*ms)) : nlohmann::json(nullptr);
    };
    j["preemption"] = {{"provider", *run.preemption_provider},
                       {"notice_at", iso(run.preemption_notice_unix_ms)},
                       {"deadline", iso(run.preemption_deadline_unix_ms)}};
  } else {
    j["preemption"] = nullptr;
  }
  j["last_checkpoint_s"] = run.last_checkpoint_ms
                               ? nlohmann::json(static_cast<double>(*run.last_checkpoint_ms) / 1000.0)
                               : nlohmann::json(nullptr);
  j["lost_work_usd"] = run.lost_work_micros ? nlohmann::json(util::micros_to_usd(*run.lost_work_micros))
                                            : nlohmann::json(nullptr);
  j["target"] = r.target ? detail::target_json(*r.target) : nlohmann::json(nullptr);
  j["notes"] = r.notes;
  j["findings"] = findings::to_json(r.findings);
  return j.dump(2) + "\n";
}

std::string render_run_report_csv(const RunReport& r) {
  auto q = [](const std::string& s) {
    std::string o = "\"";
    for (char c : s) o += c == '"' ? std::string("\"\"") : std::string(1, c);
    return o + "\"";
  };
  auto o = [](const auto& v) { return v ? fmt::format("{}", *v) : std::string(); };
  const store::RunRecord& run = r.run;
  std::string out =
      "run_id,command,status,exit_code,stopped_by,wall_s,billed_s,cost_usd,price_usd_per_gpu_hour,price_"
      "source,"
      "gpus_allocated,gpus_used,idle_cost_usd,unused_gpu_cost_usd,energy_kwh,energy_method,co2_kg,steps,"
      "total_steps,"
      "forecast_cost_usd\n";
  std::string alloc, used;
  for (const auto& u : run.gpus_allocated) alloc += (alloc.empty() ? "" : " ") + u;
  for (const auto& u : run.gpus_used) used += (used.empty() ? "" : " ") + u;
  out += fmt::format("{},{},{},{},{},{:.3f},{},{:.6f},{:.6f},{},{},{},{:.6f},{:.6f},{:.6f},{},{},{},{},{}\n",
                     run.id, q(run.command), util::text_of(run.status), o(run.exit_code),
                     run.stopped_by.value_or(""), r.wall_s, run.billed_s,
                     util::micros_to_usd(run.cost_micros), util::micros_to_usd(run.price_micros_per_gpu_hour),
                     q(run.price_source), q(alloc), q(used), r.idle_cost_usd, r.unused_gpu_cost_usd,
                     run.energy_j / 3.6e6, util::text_of(run.energy_method), o(run.co2_kg), o(r.steps),
                     o(r.total_steps), o(run.forecast_cost_usd));
  return out;
}

std::string render_run_report_text(const RunReport& r, bool simulated) {
  const store::RunRecord& run = r.run;
  std::string o;
  const std::string sim = simulated ? "SIMULATED " : "";
  o += fmt::format("── {}gpumeter run {} ── {} ──\n", sim, run.id, run.command);
  o += fmt::format("  status          {}\n", describe_status(run));
  if (!r.findings.empty()) {
    // Findings first (docs/findings.md), indented under the heading.
    std::string text = findings::to_text(r.findings);
    std::string indented;
    std::size_t pos = 0;
    while (pos < text.size()) {
      const std::size_t eol = text.find('\n', pos);
      const std::string line = text.substr(pos, eol - pos);
      if (!line.empty()) indented += "  " + line + "\n";
      pos = eol == std::string::npos ? text.size() : eol + 1;
    }
    o += indented;
  }
  o += fmt::format("  wall / billed   {} / {} s\n", util::format_duration_s(r.wall_s), run.billed_s);
  const bool telemetry = r.telemetry != "none";
  if (telemetry)
    o += fmt::format("  cost            {}  ({}/GPU-h × {} GPU, {})\n",
                     util::format_usd(util::micros_to_usd(run.cost_micros)),
                     util::format_usd(util::micros_to_usd(run.price_micros_per_gpu_hour)),
                     run.gpus_allocated.size(), run.price_source);
  else  // the price times the wall time: no GPU count is known
    o += fmt::format("  cost            {}  ({}/h × the wall time, {})\n",
                     util::format_usd(util::micros_to_usd(run.cost_micros)),
                     util::format_usd(util::micros_to_usd(run.price_micros_per_gpu_hour)), run.price_source);
  if (run.budget_micros) o += fmt::format("  budget          {}\n", util::format_micros(*run.budget_micros));
  if (telemetry) {
    o += fmt::format("  GPUs            {} allocated, {} used\n", run.gpus_allocated.size(),
                     run.gpus_used.size());
    o += fmt::format("  idle cost       {} (used GPUs below full utilization)\n",
                     util::format_usd(r.idle_cost_usd));
    o += fmt::format("  unused GPUs     {}\n", util::format_usd(r.unused_gpu_cost_usd));
  } else {
    o += "  GPUs            not known (no GPU telemetry): no idle or unused-GPU cost\n";
  }
  if (run.energy_method != store::RunEnergyMethod::none)
    o += fmt::format("  energy          {:.4f} kWh ({})\n", run.energy_j / 3.6e6,
                     util::text_of(run.energy_method));
  else
    o += "  energy          not available (no energy counter or power readings)\n";
  if (run.co2_kg) o += fmt::format("  CO2             {:.4f} kg ({})\n", *run.co2_kg, run.carbon_source);
  if (r.effective_utilization)
    o += fmt::format("  effective util  {:.1f}%\n", *r.effective_utilization * 100.0);
  if (r.startup)
    o += fmt::format("  start-up        {} before the first GPU work, {} ({:.1f}% of the cost{})\n",
                     util::format_duration_s(static_cast<double>(r.startup->ms) / 1000),
                     util::format_usd(util::micros_to_usd(r.startup->cost_micros)),
                     100 * r.startup->share_of_run,
                     r.startup->share_of_total
                         ? fmt::format(", {:.1f}% of the whole job's", 100 * *r.startup->share_of_total)
                         : std::string());
  if (r.process_on_gpu_ms && (!r.startup || *r.process_on_gpu_ms < r.startup->ms))
    o += fmt::format("  on the GPU      a process of the job from {} (a CUDA context, not yet work)\n",
                     util::format_duration_s(static_cast<double>(*r.process_on_gpu_ms) / 1000));
  if (r.steady_state == false) o += "  steady state    not reached: the run is start-up only (see notes)\n";
  for (const auto& g : r.gpus) {
    o += fmt::format("  GPU {} {}  util avg {} peak {}  mem avg {} peak {}{}\n", g.index, g.uuid,
                     g.util_avg_pct ? fmt::format("{:.0f}%", *g.util_avg_pct) : "n/a",
                     g.util_peak_pct ? fmt::format("{:.0f}%", *g.util_peak_pct) : "n/a",
                     g.mem_avg_bytes ? util::format_bytes(*g.mem_avg_bytes) : "n/a",
                     g.mem_peak_bytes ? util::format_bytes(*g.mem_peak_bytes) : "n/a",
                     g.used ? "" : "  (never used)");
    if (const std::string activity = detail::gpm_text(g.activity.mean()); !activity.empty())
      o += "          activity while working: " + activity + "\n";
  }
  if (r.steps)
    o += fmt::format("  steps           {}{}\n", *r.steps,
                     r.total_steps ? fmt::format(" / {}", *r.total_steps) : "");
  if (r.usd_per_step) o += fmt::format("  cost per step   {}\n", util::format_usd(*r.usd_per_step));
  if (r.usd_per_1k_samples)
    o += fmt::format("  $ / 1k samples  {}\n", util::format_usd(*r.usd_per_1k_samples));
  if (r.usd_per_1m_tokens) o += fmt::format("  $ / 1M tokens   {}\n", util::format_usd(*r.usd_per_1m_tokens));
  if (r.mfu) o += fmt::format("  MFU             {:.1f}% ({})\n", *r.mfu * 100.0, r.mfu_basis.value_or(""));
  if (r.serving) {
    const ServingKpis& k = *r.serving;
    auto n = [](const std::optional<double>& v) {
      return v ? fmt::format("{:.0f}", *v) : std::string("n/a");
    };
    std::string models;
    for (const auto& m : k.models) models += (models.empty() ? "" : ", ") + m;
    o += fmt::format("  serving         {} ({})  {} prompt + {} generated tokens, {} requests\n",
                     k.engine.empty() ? "engine" : k.engine, models, n(k.prompt_tokens),
                     n(k.generated_tokens), n(k.requests));
    if (k.usd_per_1m_generated_tokens)
      o += fmt::format("  $ / 1M gen tok  {}{}\n", util::format_usd(*k.usd_per_1m_generated_tokens),
                       k.usd_per_1m_prompt_tokens ? fmt::format("  ($ / 1M prompt tok {})",
                                                                util::format_usd(*k.usd_per_1m_prompt_tokens))
                                                  : "");
    if (k.usd_per_1m_tokens)
      o += fmt::format("  $ / 1M tokens   {} (prompt + generated)\n", util::format_usd(*k.usd_per_1m_tokens));
    if (k.usd_per_1k_requests)
      o += fmt::format("  $ / 1k requests {}\n", util::format_usd(*k.usd_per_1k_requests));
    if (k.generated_tokens_per_s)
      o += fmt::format("  gen tokens/s    {:.1f} mean{}\n", *k.generated_tokens_per_s,
                       k.peak_generated_tokens_per_s
                           ? fmt::format(", {:.1f} peak (load {:.0f}%)", *k.peak_generated_tokens_per_s,
                                         k.load_ratio.value_or(0) * 100.0)
                           : "");
    if (k.usd_per_1m_generated_tokens && k.usd_per_1m_generated_tokens_at_peak)
      o += fmt::format("  at saturation   {} per 1M generated tokens at the observed peak (now {})\n",
                       util::format_usd(*k.usd_per_1m_generated_tokens_at_peak),
                       util::format_usd(*k.usd_per_1m_generated_tokens));
    if (k.plan_usd_per_1m_generated_tokens)
      o += fmt::format(
          "  plan predicts   {} per 1M generated tokens ({} on these GPUs at this price, {} concurrent "
          "sequences, the run's mean request shape)\n",
          util::format_usd(*k.plan_usd_per_1m_generated_tokens), k.plan_model.value_or("?"),
          k.plan_batch.value_or(0));
    else if (!k.plan_note.empty())
      o += fmt::format("  plan predicts   - ({})\n", k.plan_note);
  }
  if (!r.metrics.empty()) {
    std::string m;
    for (const auto& [k, v] : r.metrics) m += fmt::format("{}{} {:.4g}", m.empty() ? "" : ", ", k, v);
    o += fmt::format("  last metrics    {}\n", m);
  }
  if (run.forecast_cost_usd)
    o += fmt::format("  last forecast   {}\n", util::format_usd(*run.forecast_cost_usd));
  const auto checkpoints =
      std::count_if(r.actions.begin(), r.actions.end(),
                    [](const store::ActionRecord& a) { return a.kind == store::ActionKind::checkpoint; });
  if (run.last_checkpoint_ms)
    o += fmt::format("  checkpoints     {} seen, the last at {}\n", checkpoints,
                     util::format_duration_s(static_cast<double>(*run.last_checkpoint_ms) / 1000.0));
  if (run.lost_work_micros)
    o += fmt::format(
        "  lost work       {} ({})\n", util::format_usd(util::micros_to_usd(*run.lost_work_micros)),
        run.last_checkpoint_ms ? "GPU cost since the last checkpoint" : "no checkpoint seen: all of it");
  if (r.target) o += detail::target_text(*r.target);
  for (const auto& a : r.actions)
    if (a.kind != store::ActionKind::checkpoint)
      o +=
          fmt::format("  action {:>7.1f}s  {:<14} {}  {}\n", static_cast<double>(a.t_ms) / 1000.0,
                      util::text_of(a.kind), util::format_usd(util::micros_to_usd(a.cost_micros)), a.message);
  if (r.rightsizing) {
    const auto& h = *r.rightsizing;
    o += fmt::format(
        "  rightsizing     {} ({} memory holds the {} peak + {:.0f}% headroom) at {:.2f}x the price ({}); "
        "{}\n",
        h.gpu, util::format_bytes(h.gpu_memory_bytes), util::format_bytes(h.peak_bytes),
        kRightsizingHeadroom * 100, h.price_ratio, h.price_basis, h.assumption);
  }
  for (const auto& n : r.notes) o += "  note: " + n + "\n";
  if (!r.cells.empty()) {
    // Notebook cells, the most expensive first (at most 5 here; all of them in --json).
    std::vector<const store::CellRecord*> top;
    for (const auto& c : r.cells) top.push_back(&c);
    std::stable_sort(top.begin(), top.end(), [](const store::CellRecord* a, const store::CellRecord* b) {
      return a->cost_micros > b->cost_micros;
    });
    o += fmt::format("  cells           {} executed; the most expensive:\n", r.cells.size());
    for (std::size_t i = 0; i < top.size() && i < 5; ++i)
      o += fmt::format(
          "    [{}] {} · {} · {}{}\n", top[i]->cell_id,
          util::format_usd(util::micros_to_usd(top[i]->cost_micros)),
          util::format_duration_s(static_cast<double>(top[i]->end_ms - top[i]->start_ms) / 1000.0),
          top[i]->utilization_pct ? fmt::format("util {:.0f}% · ", *top[i]->utilization_pct) : "",
          top[i]->source);
  }
  return o;
}

}  // namespace gm::report
