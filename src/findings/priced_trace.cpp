// The one place a trace's figures are priced (issue 36): every renderer of `gpumeter trace` and `trace diff`
// reads these costs.
#include "findings/priced_trace.h"

#include "meter/meter.h"

namespace gm::findings {
namespace {

/// Prices GPU time at one price: meter's integer pico-dollars, converted to dollars for display.
struct Pricer {
  std::optional<MicroUsd> micros_per_gpu_hour;

  UsdOrNone operator()(std::int64_t ns) const {
    if (!micros_per_gpu_hour) return std::nullopt;
    return util::picos_to_usd(meter::gpu_ns_cost_pico_usd(*micros_per_gpu_hour, ns));
  }
  /// A mean or a per-step figure (rounded to the nanosecond).
  UsdOrNone of_mean(double ns) const {
    if (!micros_per_gpu_hour) return std::nullopt;
    return meter::gpu_ns_cost_usd(*micros_per_gpu_hour, ns);
  }
};

BreakdownCosts breakdown_costs(const std::vector<trace::Bucket>& rows, const Pricer& usd, bool steps) {
  BreakdownCosts c;
  c.attributed_usd.reserve(rows.size());
  for (const auto& b : rows) {
    c.attributed_usd.push_back(usd(b.attributed_ns));
    if (steps) {
      const bool real_step = b.step_ns > 0 || b.name != "(outside steps)";
      c.step_usd.push_back(real_step ? usd(b.step_ns) : std::nullopt);
    }
  }
  c.rest_usd.resize(rows.size() + 1);
  std::int64_t rest_ns = 0;
  c.rest_usd[rows.size()] = usd(0);
  for (std::size_t i = rows.size(); i-- > 0;) {
    rest_ns += rows[i].attributed_ns;
    c.rest_usd[i] = usd(rest_ns);
  }
  return c;
}

DeviceCosts device_costs(const trace::DeviceAnalysis& d, const Pricer& usd, const catalog::Catalog* catalog,
                         std::optional<std::int64_t> project_steps) {
  DeviceCosts c;
  c.window_usd = usd(d.window_ns);
  c.busy_usd = usd(d.busy_ns);
  c.idle_usd = usd(d.idle_ns);
  c.compute_usd = usd(d.compute_ns);
  c.communication_usd = usd(d.communication_ns);
  c.memory_usd = usd(d.memory_ns);
  c.overlap_usd = usd(d.overlap_ns);
  c.kernel_usd = usd(d.kernel_ns);
  c.idle_host_wait_usd = usd(d.idle_host_wait_ns);
  c.idle_dispatch_usd = usd(d.idle_dispatch_ns);
  c.idle_input_usd = usd(d.idle_input_ns);
  c.idle_host_sync_usd = usd(d.idle_host_sync_ns);
  c.idle_other_usd = usd(d.idle_other_ns);
  c.idle_in_graph_usd = usd(d.idle_in_graph_ns);
  c.before_window_usd = usd(d.before_window.attributed_ns);
  if (d.step_ns.count > 0 && usd.micros_per_gpu_hour) {
    c.per_step_usd = usd.of_mean(d.step_ns.mean);
    c.idle_per_1k_steps_usd = meter::usd_per_1k(*c.idle_usd, static_cast<double>(d.step_ns.count));
    if (project_steps)
      c.projected_usd = meter::usd_for_units(*c.per_step_usd, static_cast<double>(*project_steps));
  }
  c.kernels = breakdown_costs(d.kernels, usd, false);
  c.operators = breakdown_costs(d.operators, usd, false);
  c.annotations = breakdown_costs(d.annotations, usd, false);
  c.steps = breakdown_costs(d.steps, usd, true);
  c.before_window_kernels = breakdown_costs(d.before_window.kernels, usd, false);
  c.findings = for_trace_device(d, usd.micros_per_gpu_hour, catalog);
  return c;
}

HostCosts host_costs(const trace::HostAnalysis& h, const Pricer& usd) {
  HostCosts c;
  c.window_usd = usd(h.window_ns);
  if (h.step_ns.count > 0) c.per_step_usd = usd.of_mean(h.step_ns.mean);
  for (const auto& b : h.steps) c.steps_usd.push_back(usd(b.step_ns));
  c.findings = for_trace_host(h, usd.micros_per_gpu_hour);
  return c;
}

JobCosts job_costs(const trace::JobAnalysis& job, const Pricer& usd) {
  JobCosts c;
  c.gpu_usd = usd(job.gpu_ns);
  c.wait_usd = usd(job.wait_ns);
  for (const auto& r : job.ranks) {
    c.rank_wait_caused_usd.push_back(usd(r.wait_caused_ns));
    c.rank_wait_suffered_usd.push_back(usd(r.wait_suffered_ns));
  }
  for (const auto& s : job.steps) {
    c.step_wait_usd.push_back(usd(s.wait_ns));
    auto& by_rank = c.step_rank_wait_usd.emplace_back();
    for (const auto ns : s.wait_by_rank_ns) by_rank.push_back(usd(ns));
  }
  return c;
}

std::vector<DiffRowCosts> diff_row_costs(const std::vector<trace::DiffRow>& rows, const Pricer& usd) {
  std::vector<DiffRowCosts> out;
  out.reserve(rows.size());
  for (const auto& r : rows)
    out.push_back({usd.of_mean(r.base_ns), usd.of_mean(r.new_ns), usd.of_mean(r.new_ns - r.base_ns)});
  return out;
}

}  // namespace

PricedTrace price_trace(std::vector<trace::FileAnalysis> files, const TracePrice& price,
                        const catalog::Catalog* catalog, std::optional<std::int64_t> project_steps) {
  const Pricer usd{price.micros_per_gpu_hour};
  PricedTrace p;
  p.price = price;
  p.project_steps = project_steps;
  p.files = std::move(files);
  p.jobs = trace::analyze_jobs(p.files);
  for (const auto& f : p.files) {
    FileCosts& fc = p.costs.emplace_back();
    for (const auto& d : f.devices) {
      fc.devices.push_back(device_costs(d, usd, catalog, project_steps));
      ++p.totals.devices;
      p.totals.window_ns += d.window_ns;
      p.totals.busy_ns += d.busy_ns;
      p.totals.idle_ns += d.idle_ns;
    }
    if (f.host) fc.host = host_costs(*f.host, usd);
  }
  p.totals.window_usd = usd(p.totals.window_ns);
  for (const auto& job : p.jobs) {
    p.job_costs.push_back(job_costs(job, usd));
    if (job.instances > 0) p.totals.straggler_ns = p.totals.straggler_ns.value_or(0) + job.wait_ns;
  }
  if (p.totals.straggler_ns) p.totals.straggler_usd = usd(*p.totals.straggler_ns);
  return p;
}

std::optional<std::string> first_gpu_name(const std::vector<trace::FileAnalysis>& files) {
  for (const auto& f : files)
    for (const auto& d : f.devices)
      if (d.gpu_name) return d.gpu_name;
  return std::nullopt;
}

PricedDiff price_diff(trace::TraceDiff diff, const TracePrice& price) {
  const Pricer usd{price.micros_per_gpu_hour};
  PricedDiff p;
  p.price = price;
  p.summary = diff_row_costs(diff.summary, usd);
  p.kernels = diff_row_costs(diff.kernels, usd);
  p.operators = diff_row_costs(diff.operators, usd);
  p.annotations = diff_row_costs(diff.annotations, usd);
  p.diff = std::move(diff);
  return p;
}

}  // namespace gm::findings
