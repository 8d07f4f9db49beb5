// Findings of a run (docs/findings.md): unused GPUs, low effective utilisation, a cheaper GPU that holds the
// peak memory, a forecast beyond the budget. Money in integer nano-dollars from the run's micro-dollars.
#include <fmt/format.h>

#include <algorithm>

#include "meter/meter.h"
#include "report/detail/run_activity.h"
#include "report/multi.h"
#include "report/run_report.h"
#include "util/units.h"

namespace gm::report {

using findings::Finding;
using findings::Severity;

namespace detail {

Severity severity_of(MicroUsd part, MicroUsd whole) {
  if (whole <= 0) return Severity::info;
  const double share = meter::cost_share(part, whole);
  if (share >= 0.30) return Severity::high;
  if (share >= 0.15) return Severity::medium;
  if (share >= 0.05) return Severity::low;
  return Severity::info;
}

void price_finding(Finding& f, MicroUsd part, const RunReport& r) {
  f.cost_nano_usd = meter::micros_to_nanos(part);
  if (r.steps) f.nano_usd_per_1k_steps = meter::nano_usd_per_1k(part, *r.steps);
  // The rate is that of the billed time (billing rounds wall time up), so a month costs what it would be
  // billed.
  const std::int64_t billed_ms = r.run.billed_s > 0 ? r.run.billed_s * 1000 : r.run.wall_ms;
  f.nano_usd_per_month = meter::nano_usd_per_month(part, billed_ms);
}

}  // namespace detail

using detail::price_finding;
using detail::severity_of;

std::vector<Finding> run_findings(const RunReport& r) {
  std::vector<Finding> out;
  const store::RunRecord& run = r.run;
  const std::int64_t wall_ns = run.wall_ms * 1'000'000;
  if (run.price_micros_per_gpu_hour <= 0 || run.wall_ms <= 0) return out;

  const auto allocated = static_cast<std::int64_t>(run.gpus_allocated.size());
  const auto used = static_cast<std::int64_t>(run.gpus_used.size());
  // A run that ended during its start-up says nothing about how the job uses its GPUs in steady state: no
  // advice from its utilization, idle time or the GPUs it had reached so far (the report's note says so).
  const bool steady = r.steady_state != false;
  if (steady && allocated > used && run.unused_gpu_cost_micros > 0) {
    Finding f;
    f.kind = "unused_gpus";
    f.severity = severity_of(run.unused_gpu_cost_micros, run.cost_micros);
    f.at_stake_ns = (allocated - used) * wall_ns;
    f.summary = fmt::format("{} of {} allocated GPUs never ran the job", allocated - used, allocated);
    f.action = used == 0 ? std::string(
                               "the job used no GPU: run it on a CPU instance, or check that it sees its "
                               "GPUs (CUDA_VISIBLE_DEVICES, the device it puts tensors on)")
                         : fmt::format(
                               "allocate {} GPU(s): set CUDA_VISIBLE_DEVICES, --gres=gpu:{} or the pod's "
                               "GPU limit to what the job uses",
                               used, used);
    f.evidence.push_back({"gpus_allocated", allocated});
    f.evidence.push_back({"gpus_used", used});
    f.evidence.push_back({"unused_gpu_cost_usd", util::micros_to_usd(run.unused_gpu_cost_micros)});
    price_finding(f, run.unused_gpu_cost_micros, r);
    out.push_back(std::move(f));
  }

  // Start-up is startup_overhead's: the busy share and the idle cost here are those after it (a 24 s run on
  // an H200 whose first 11 s were start-up read "busy 47 %" while it trained at 90 %).
  std::optional<double> busy = r.effective_utilization;
  MicroUsd idle_micros = run.idle_cost_micros;
  std::int64_t span_ns = wall_ns;
  const bool after_startup = r.startup && busy && allocated > 0 && r.startup->ms < run.wall_ms;
  if (after_startup) {
    busy = std::min(
        1.0, *busy * static_cast<double>(run.wall_ms) / static_cast<double>(run.wall_ms - r.startup->ms));
    idle_micros = meter::idle_after_startup_micros(
        idle_micros, meter::share_of_micros(r.startup->cost_micros, static_cast<std::uint64_t>(used),
                                            static_cast<std::uint64_t>(allocated)));
    span_ns = (run.wall_ms - r.startup->ms) * 1'000'000;
  }
  if (steady && busy && *busy < 0.5 && idle_micros > 0) {
    Finding f;
    f.kind = "low_utilization";
    f.severity = severity_of(idle_micros, run.cost_micros);
    f.at_stake_ns = static_cast<std::int64_t>((1.0 - *busy) * static_cast<double>(span_ns) *
                                              static_cast<double>(std::max<std::int64_t>(used, 1)));
    f.summary = fmt::format("the GPUs the job used were busy {:.0f}% of the time{}", 100 * *busy,
                            after_startup ? " after start-up" : "");
    f.action =
        "find what the GPU waits for: profile a few steps (torch.profiler) and run `gpumeter trace` on the "
        "result; input-bound jobs need more DataLoader workers and pinned memory, small ones a larger batch";
    f.evidence.push_back({"effective_utilization", *r.effective_utilization});
    if (after_startup) f.evidence.push_back({"utilization_after_startup", *busy});
    f.evidence.push_back({"idle_cost_usd", util::micros_to_usd(idle_micros)});
    price_finding(f, idle_micros, r);
    out.push_back(std::move(f));
  }

  // The longest idle stretch of a used GPU: long enough to matter (10 minutes, or a fifth of the run) and
  // more than a couple of samples, so that start-up and one slow interval do not count.
  {
    const meter::GpuUsage* worst = nullptr;
    for (const auto& g : r.gpus)
      if (g.used && (worst == nullptr || g.idle_stretch_ms > worst->idle_stretch_ms)) worst = &g;
    // A stretch from the run's start is its start-up: startup_overhead below says it with its cost.
    const bool is_startup = worst != nullptr && worst->idle_stretch_start_ms == 0 && r.startup;
    if (steady && worst != nullptr && !is_startup && worst->idle_stretch_intervals >= 3 &&
        worst->idle_stretch_cost_micros > 0 &&
        (worst->idle_stretch_ms >= 10 * 60 * 1000 || worst->idle_stretch_ms * 5 >= run.wall_ms)) {
      const double from_s = static_cast<double>(worst->idle_stretch_start_ms) / 1000;
      const double len_s = static_cast<double>(worst->idle_stretch_ms) / 1000;
      Finding f;
      f.kind = "idle_stretch";
      f.severity = severity_of(worst->idle_stretch_cost_micros, run.cost_micros);
      f.at_stake_ns = worst->idle_stretch_ms * 1'000'000;
      f.summary = fmt::format(
          "GPU {} sat under {:.0f}% utilization for {} in one stretch, from {} to {} "
          "after the start",
          worst->index, meter::kIdleUtilPct, util::format_duration_s(len_s), util::format_duration_s(from_s),
          util::format_duration_s(from_s + len_s));
      f.action =
          "see what the job did then (evaluation, data preparation, a checkpoint upload on the CPU, or a "
          "hang): "
          "move that work off the GPU instance or overlap it with training; `gpumeter run --max-idle DUR` "
          "stops "
          "a run that idles longer than DUR";
      f.evidence.push_back({"gpu_index", static_cast<std::int64_t>(worst->index)});
      f.evidence.push_back({"start_s", from_s});
      f.evidence.push_back({"duration_s", len_s});
      f.evidence.push_back({"stretch_cost_usd", util::micros_to_usd(worst->idle_stretch_cost_micros)});
      price_finding(f, worst->idle_stretch_cost_micros, r);
      out.push_back(std::move(f));
    }
  }

  // Billed time before a GPU first did work: set-up, image pull, downloads, model loading.
  if (r.startup && r.startup->ms > 0 && r.startup->share_of_run >= 0.05) {
    const Startup& s = *r.startup;
    Finding f;
    f.kind = "startup_overhead";
    f.severity = severity_of(s.cost_micros, run.cost_micros);
    f.at_stake_ns = s.ms * 1'000'000 * allocated;
    f.summary = fmt::format(
        "the GPUs were billed for {} before any of them did work: {}, {:.0f}% of the run{}",
        util::format_duration_s(static_cast<double>(s.ms) / 1000),
        util::format_usd(util::micros_to_usd(s.cost_micros)), 100 * s.share_of_run,
        s.share_of_total ? fmt::format(" ({:.1f}% of the whole job's {})", 100 * *s.share_of_total,
                                       util::format_usd(util::micros_to_usd(*s.total_micros)))
                         : std::string());
    f.action =
        "start on the GPU sooner: a prebuilt image with the environment installed (no pip/conda install at "
        "start-up), data and weights on local disk or a warm cache instead of downloading them each run, "
        "lazy loading (memory-mapped safetensors, streaming datasets); for short jobs, batch several into "
        "one run so the set-up is paid once";
    f.evidence.push_back({"startup_s", static_cast<double>(s.ms) / 1000});
    f.evidence.push_back({"startup_cost_usd", util::micros_to_usd(s.cost_micros)});
    f.evidence.push_back({"share_of_run", s.share_of_run});
    if (s.share_of_total) f.evidence.push_back({"share_of_total", *s.share_of_total});
    f.evidence.push_back(
        {"first_work",
         std::string("utilization >= 5% on a GPU the job used (at the start of the sample "
                     "interval that showed it) or the job's first progress step, whichever came "
                     "first")});
    if (r.process_on_gpu_ms)
      f.evidence.push_back({"process_on_gpu_s", static_cast<double>(*r.process_on_gpu_ms) / 1000});
    price_finding(f, s.cost_micros, r);
    out.push_back(std::move(f));
  }

  if (r.rightsizing && r.rightsizing->price_ratio > 0 && r.rightsizing->price_ratio < 1) {
    const auto& h = *r.rightsizing;
    const MicroUsd saved = meter::scale_micros(run.cost_micros, 1.0 - h.price_ratio);
    Finding f;
    f.kind = "rightsizing";
    f.severity = severity_of(saved, run.cost_micros);
    f.at_stake_ns = static_cast<std::int64_t>(static_cast<double>(wall_ns) * (1.0 - h.price_ratio));
    f.summary =
        fmt::format("the memory peak ({:.1f} GiB) fits a {} at {:.2f}x the price ({})",
                    static_cast<double>(h.peak_bytes) / (1ULL << 30), h.gpu, h.price_ratio, h.price_basis);
    f.action = fmt::format("try the job on a {} ({})", h.gpu, h.assumption);
    f.evidence.push_back({"peak_memory_bytes", static_cast<std::int64_t>(h.peak_bytes)});
    f.evidence.push_back({"candidate_gpu", h.gpu});
    f.evidence.push_back({"price_ratio", h.price_ratio});
    f.evidence.push_back({"price_basis", h.price_basis});
    price_finding(f, saved, r);
    out.push_back(std::move(f));
  }

  // `gpumeter attach` recorded idle GPUs with the job's memory held on them (a notebook kernel left open).
  const bool idle_held = std::any_of(r.actions.begin(), r.actions.end(), [](const store::ActionRecord& a) {
    return a.kind == store::ActionKind::idle_gpus_held;
  });
  if (idle_held) {
    const meter::GpuUsage* worst = nullptr;
    for (const auto& g : r.gpus)
      if (worst == nullptr || g.idle_stretch_ms > worst->idle_stretch_ms) worst = &g;
    const MicroUsd usd_per_h_micros =
        meter::micros_times(run.price_micros_per_gpu_hour,
                            static_cast<std::int64_t>(std::max<std::size_t>(1, run.gpus_allocated.size())));
    Finding f;
    f.kind = "idle_gpus_held";
    const MicroUsd part =
        worst ? meter::micros_times(worst->idle_stretch_cost_micros, static_cast<std::int64_t>(r.gpus.size()))
              : 0;
    f.severity = std::max(Severity::medium, severity_of(part, run.cost_micros));
    f.at_stake_ns = worst ? worst->idle_stretch_ms * 1'000'000 : 0;
    f.summary = fmt::format(
        "the GPUs idled under 5% utilization for {} while the process held memory on them, "
        "at {}/h",
        util::format_duration_s(worst ? static_cast<double>(worst->idle_stretch_ms) / 1000 : 0),
        util::format_micros(usd_per_h_micros));
    f.action =
        "free the GPU memory (del the tensors, torch.cuda.empty_cache()) or shut the kernel down when it is "
        "not computing; save the state and restart later";
    f.evidence.push_back({"idle_s", worst ? static_cast<double>(worst->idle_stretch_ms) / 1000 : 0.0});
    f.evidence.push_back({"usd_per_h", util::micros_to_usd(usd_per_h_micros)});
    price_finding(f, part, r);
    out.push_back(std::move(f));
  }

  const MicroUsd over = run.budget_micros && run.forecast_cost_usd
                            ? meter::forecast_over_budget_micros(*run.forecast_cost_usd, *run.budget_micros)
                            : 0;
  if (over > 0) {
    Finding f;
    f.kind = "forecast_over_budget";
    f.severity = Severity::high;
    f.summary =
        fmt::format("the forecast total {} is over the {} budget", util::format_usd(*run.forecast_cost_usd),
                    util::format_micros(*run.budget_micros));
    f.action = "stop early (--forecast-stop), checkpoint and resume on a cheaper offer, or raise the budget";
    f.evidence.push_back({"forecast_cost_usd", *run.forecast_cost_usd});
    f.evidence.push_back({"budget_usd", util::micros_to_usd(*run.budget_micros)});
    f.cost_nano_usd = meter::micros_to_nanos(over);
    out.push_back(std::move(f));
  }
  // A spot job that went longer than its Young/Daly interval without a checkpoint (the supervisor's warning):
  // what a preemption at that moment would have thrown away.
  for (const auto& a : r.actions) {
    if (a.kind != store::ActionKind::no_recent_checkpoint) continue;
    MicroUsd since = 0;
    std::int64_t since_ms = 0;
    for (const auto& c : r.actions)
      if (c.kind == store::ActionKind::checkpoint && c.t_ms <= a.t_ms) {
        since = c.cost_micros;
        since_ms = c.t_ms;
      }
    const MicroUsd at_risk = std::max<MicroUsd>(0, meter::cost_between_micros(a.cost_micros, since));
    Finding f;
    f.kind = "no_recent_checkpoint";
    f.severity = severity_of(at_risk, run.cost_micros);
    if (f.severity == Severity::info && run.status == store::RunStatus::preempted) f.severity = Severity::low;
    f.at_stake_ns = (a.t_ms - since_ms) * 1'000'000;
    f.summary = fmt::format("the job went {} without a checkpoint on spot capacity ({} at risk)",
                            util::format_duration_s(static_cast<double>(a.t_ms - since_ms) / 1000.0),
                            util::format_usd(util::micros_to_usd(at_risk)));
    f.action =
        "checkpoint at least every Young/Daly interval (`gpumeter plan --spot` gives it) and on SIGTERM; "
        "tell "
        "gpumeter with gpumeter.checkpoint() or --checkpoint-glob";
    f.evidence.push_back({"gap_s", static_cast<double>(a.t_ms - since_ms) / 1000.0});
    f.evidence.push_back({"at_risk_usd", util::micros_to_usd(at_risk)});
    if (run.lost_work_micros)
      f.evidence.push_back({"lost_work_usd", util::micros_to_usd(*run.lost_work_micros)});
    price_finding(f, at_risk, r);
    out.push_back(std::move(f));
    break;
  }
  // A month of a run that never left its start-up is not a month of the job.
  if (!steady)
    for (auto& f : out) f.nano_usd_per_month.reset();
  std::stable_sort(out.begin(), out.end(), [](const Finding& a, const Finding& b) {
    if (a.severity != b.severity) return a.severity > b.severity;
    return a.cost_nano_usd.value_or(0) > b.cost_nano_usd.value_or(0);
  });
  return out;
}

std::vector<Finding> multi_findings(const MultiReport& rep) {
  std::vector<Finding> out;
  const GroupTotals& t = rep.total;
  const MicroUsd waste = t.waste_micros();
  if (t.cost_micros <= 0 || meter::share_under(waste, t.cost_micros, 20)) return out;
  Finding f;
  f.kind = "fleet_waste";
  f.severity = severity_of(waste, t.cost_micros);
  f.at_stake_ns = static_cast<std::int64_t>(meter::in_cost_share(t.gpu_hours * 3600e9, waste, t.cost_micros));
  f.summary =
      fmt::format("idle GPU time and allocated GPUs never used cost {} ({:.0f}% of {}) over {} run(s)",
                  util::format_micros(waste), meter::cost_share_pct(waste, t.cost_micros),
                  util::format_micros(t.cost_micros), t.runs);
  const TopRun* worst = nullptr;
  for (const auto& r : rep.top_runs)
    if (r.waste_micros > 0 && (worst == nullptr || r.waste_micros > worst->waste_micros)) worst = &r;
  f.action =
      worst != nullptr
          ? fmt::format("start with run {} ({}, {} wasted): `gpumeter report {}` shows why and what to do",
                        worst->id, worst->command, util::format_micros(worst->waste_micros), worst->id)
          : std::string("`gpumeter report RUN` on the costliest runs shows why and what to do");
  f.cost_nano_usd = meter::micros_to_nanos(waste);
  if (rep.since_unix_ms && rep.until_unix_ms)
    f.nano_usd_per_month = meter::nano_usd_per_month(waste, *rep.until_unix_ms - *rep.since_unix_ms);
  f.evidence.push_back({"idle_cost_usd", util::micros_to_usd(t.idle_cost_micros)});
  f.evidence.push_back({"unused_gpu_cost_usd", util::micros_to_usd(t.unused_gpu_cost_micros)});
  f.evidence.push_back({"cost_usd", util::micros_to_usd(t.cost_micros)});
  f.evidence.push_back({"runs", t.runs});
  if (worst != nullptr) f.evidence.push_back({"worst_run", worst->id});
  out.push_back(std::move(f));
  return out;
}

}  // namespace gm::report
