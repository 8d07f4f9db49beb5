#include "report/trace_render.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>
#include <variant>

#include "findings/findings.h"
#include "findings/priced_trace.h"
#include "report/detail/trace_text.h"
#include "util/csv.h"
#include "util/json.h"
#include "util/table.h"
#include "util/units.h"

namespace gm::report {

using util::json_or_null;
namespace {

using findings::BreakdownCosts;
using findings::DeviceCosts;
using findings::PricedTrace;
using trace::Bucket;
using trace::DeviceAnalysis;
using trace::FileAnalysis;

/// An integer figure of a result type and its --json key.
template <class T>
using Figure = std::pair<const char*, std::int64_t T::*>;

/// The integer figures of `value` under their --json keys, added to `j`.
template <class T, std::size_t N>
nlohmann::json& add_figures(nlohmann::json& j, const T& value, const Figure<T> (&figures)[N]) {
  for (const auto& [key, figure] : figures) j[key] = value.*figure;
  return j;
}

/// The integer figures of a device in the --json contract, each under its own name.
constexpr Figure<DeviceAnalysis> kDeviceFigures[] = {
    {"window_start_ns", &DeviceAnalysis::window_start_ns},
    {"window_ns", &DeviceAnalysis::window_ns},
    {"busy_ns", &DeviceAnalysis::busy_ns},
    {"idle_ns", &DeviceAnalysis::idle_ns},
    {"compute_ns", &DeviceAnalysis::compute_ns},
    {"communication_ns", &DeviceAnalysis::communication_ns},
    {"memory_ns", &DeviceAnalysis::memory_ns},
    {"overlap_ns", &DeviceAnalysis::overlap_ns},
    {"kernel_ns", &DeviceAnalysis::kernel_ns},
    {"idle_host_wait_ns", &DeviceAnalysis::idle_host_wait_ns},
    {"idle_after_sync_ns", &DeviceAnalysis::idle_after_sync_ns},
    {"sync_gap_count", &DeviceAnalysis::sync_gap_count},
    {"idle_dispatch_ns", &DeviceAnalysis::idle_dispatch_ns},
    {"idle_dispatch_in_ops_ns", &DeviceAnalysis::idle_dispatch_in_ops_ns},
    {"idle_input_ns", &DeviceAnalysis::idle_input_ns},
    {"idle_input_dataloader_ns", &DeviceAnalysis::idle_input_dataloader_ns},
    {"idle_host_sync_ns", &DeviceAnalysis::idle_host_sync_ns},
    {"idle_other_ns", &DeviceAnalysis::idle_other_ns},
    {"idle_in_graph_ns", &DeviceAnalysis::idle_in_graph_ns},
    {"graph_launches", &DeviceAnalysis::graph_launches},
    {"idle_gap_count", &DeviceAnalysis::idle_gap_count},
    {"activity_count", &DeviceAnalysis::activity_count},
    {"zero_length_count", &DeviceAnalysis::zero_length_count},
};

constexpr Figure<trace::MatrixMath> kMatrixMathFigures[] = {
    {"fp32_ns", &trace::MatrixMath::fp32_ns},
    {"fp32_kernel_ns", &trace::MatrixMath::fp32_kernel_ns},
    {"fp32_count", &trace::MatrixMath::fp32_count},
    {"fp32_before_window_ns", &trace::MatrixMath::fp32_before_window_ns},
    {"tensor_core_ns", &trace::MatrixMath::tensor_core_ns},
    {"from_dtypes_count", &trace::MatrixMath::from_dtypes_count},
    {"from_names_count", &trace::MatrixMath::from_names_count}};

constexpr Figure<trace::StepsSpan> kStepsSpanFigures[] = {
    {"start_ns", &trace::StepsSpan::start_ns},
    {"span_ns", &trace::StepsSpan::span_ns},
    {"busy_ns", &trace::StepsSpan::busy_ns},
    {"compute_ns", &trace::StepsSpan::compute_ns},
    {"communication_ns", &trace::StepsSpan::communication_ns},
    {"memory_ns", &trace::StepsSpan::memory_ns}};

constexpr Figure<trace::StepSplit> kStepSplitFigures[] = {
    {"start_ns", &trace::StepSplit::start_ns},     {"step_ns", &trace::StepSplit::step_ns},
    {"compute_ns", &trace::StepSplit::compute_ns}, {"communication_ns", &trace::StepSplit::communication_ns},
    {"memory_ns", &trace::StepSplit::memory_ns},   {"idle_ns", &trace::StepSplit::idle_ns}};

/// The costs of a device in the --json contract: the window, its busy and idle parts.
constexpr std::pair<const char*, findings::UsdOrNone DeviceCosts::*> kDeviceCosts[] = {
    {"cost_usd", &DeviceCosts::window_usd},
    {"busy_cost_usd", &DeviceCosts::busy_usd},
    {"idle_cost_usd", &DeviceCosts::idle_usd}};

bool shown(const TraceRenderOptions& o, const char* what) {
  return o.by.empty() || std::find(o.by.begin(), o.by.end(), what) != o.by.end();
}

/// Mean ProfilerStep duration, or nullopt without steps.
std::optional<double> mean_step_ns(const DeviceAnalysis& d) {
  if (d.step_ns.count == 0) return std::nullopt;
  return d.step_ns.mean;
}

std::string pct(std::int64_t part, std::int64_t whole) {
  return whole > 0 ? fmt::format("{:.1f}%", 100.0 * static_cast<double>(part) / static_cast<double>(whole))
                   : "-";
}

nlohmann::json buckets_json(const std::vector<Bucket>& bs, const BreakdownCosts& c, bool kernels,
                            bool steps) {
  auto arr = nlohmann::json::array();
  for (std::size_t i = 0; i < bs.size(); ++i) {
    const Bucket& b = bs[i];
    nlohmann::json j;
    j["name"] = b.name;
    if (kernels) j["class"] = b.klass;
    j["count"] = b.count;
    j["kernel_ns"] = b.kernel_ns;
    j["attributed_ns"] = b.attributed_ns;
    j["cost_usd"] = json_or_null(c.attributed_usd[i]);
    if (steps) {
      const bool real_step = b.step_ns > 0 || b.name != "(outside steps)";
      j["step_ns"] = real_step ? nlohmann::json(b.step_ns) : nlohmann::json(nullptr);
      j["step_cost_usd"] = json_or_null(c.step_usd[i]);
    }
    arr.push_back(std::move(j));
  }
  return arr;
}

nlohmann::json stats_json(const trace::Stats& s) {
  if (s.count == 0) return nullptr;
  return {{"count", s.count}, {"mean", s.mean}, {"min", s.min},    {"p50", s.p50},
          {"p95", s.p95},     {"max", s.max},   {"stdev", s.stdev}};
}

std::string device_label(const FileAnalysis& f, const DeviceAnalysis& d) {
  std::string s = f.file;
  if (f.rank) s += fmt::format(" (rank {})", *f.rank);
  s += fmt::format(" — device {}", d.device);
  if (d.gpu_name) s += fmt::format(" ({})", *d.gpu_name);
  return s;
}

void breakdown_text(std::string& out, const char* title, const std::vector<Bucket>& bs,
                    const BreakdownCosts& c, const DeviceAnalysis& d, const TraceRenderOptions& o,
                    bool kernels) {
  util::TextTable t;
  std::vector<std::string> head{title};
  std::vector<util::TextTable::Align> al{util::TextTable::Align::left};
  if (kernels) {
    head.push_back("class");
    al.push_back(util::TextTable::Align::left);
  }
  for (const char* h : {"count", "kernel ms", "attributed ms", "share", "cost"}) {
    head.push_back(h);
    al.push_back(util::TextTable::Align::right);
  }
  t.header(head, al);
  std::size_t shown_rows = 0;
  std::int64_t rest_ns = 0, rest_count = 0, rest_kernel = 0;
  std::vector<std::string> full_names;
  for (std::size_t i = 0; i < bs.size() && i < o.top; ++i) full_names.push_back(bs[i].name);
  const std::vector<std::string> display = trace::short_names(full_names, 60);
  for (const auto& b : bs) {
    if (shown_rows >= o.top) {
      rest_ns += b.attributed_ns;
      rest_count += b.count;
      rest_kernel += b.kernel_ns;
      continue;
    }
    ++shown_rows;
    std::vector<std::string> row{display[shown_rows - 1]};
    if (kernels) row.push_back(b.klass);
    row.insert(row.end(),
               {std::to_string(b.count), detail::ms_text(b.kernel_ns), detail::ms_text(b.attributed_ns),
                pct(b.attributed_ns, d.busy_ns), util::format_usd_or(c.attributed_usd[shown_rows - 1])});
    t.row(row);
  }
  if (bs.size() > shown_rows) {
    std::vector<std::string> row{fmt::format("({} more)", bs.size() - shown_rows)};
    if (kernels) row.push_back("");
    row.insert(row.end(), {std::to_string(rest_count), detail::ms_text(rest_kernel), detail::ms_text(rest_ns),
                           pct(rest_ns, d.busy_ns), util::format_usd_or(c.rest_usd[shown_rows])});
    t.row(row);
  }
  out += t.render();
  out += "\n";
}

nlohmann::json host_json(const FileAnalysis& f, const findings::FileCosts& fc) {
  if (!f.host) return nullptr;
  const auto& h = *f.host;
  const auto& c = *fc.host;
  nlohmann::json j;
  j["cpu_only"] = f.devices.empty();
  j["label"] = f.devices.empty() ? nlohmann::json("CPU only") : nlohmann::json(nullptr);
  j["window_start_ns"] = h.window_start_ns;
  j["window_ns"] = h.window_ns;
  j["cost_usd"] = json_or_null(c.window_usd);
  j["span_count"] = h.span_count;
  j["step_count"] = h.step_ns.count;
  j["step_time_ns"] = stats_json(h.step_ns);
  j["cost_per_step_usd"] = json_or_null(c.per_step_usd);
  auto steps = nlohmann::json::array();
  for (std::size_t i = 0; i < h.steps.size(); ++i)
    steps.push_back({{"name", h.steps[i].name},
                     {"step_ns", h.steps[i].step_ns},
                     {"cost_usd", json_or_null(c.steps_usd[i])}});
  j["steps"] = std::move(steps);
  auto ops = nlohmann::json::array();
  for (const auto& op : h.operators)
    ops.push_back(
        {{"name", op.name}, {"count", op.count}, {"self_ns", op.self_ns}, {"total_ns", op.total_ns}});
  j["operators"] = std::move(ops);
  j["findings"] = findings::to_json(c.findings);
  return j;
}

/// The CPU-only report of a trace without GPU activity: host window, steps, operators by self CPU time.
void host_text(std::string& out, const FileAnalysis& f, const findings::HostCosts& c,
               const TraceRenderOptions& o) {
  const auto& h = *f.host;
  out += fmt::format("host window {} ms", detail::ms_text(h.window_ns));
  if (c.window_usd)
    out += fmt::format(", cost {} (CPU only: the host's time at the price)", util::format_usd(*c.window_usd));
  out += fmt::format("; {} CPU spans\n", h.span_count);
  if (h.step_ns.count > 0) {
    out += fmt::format("steps: {}, step time mean {:.3f} ms (min {:.3f}, p50 {:.3f}, max {:.3f})",
                       h.step_ns.count, h.step_ns.mean / 1e6, static_cast<double>(h.step_ns.min) / 1e6,
                       static_cast<double>(h.step_ns.p50) / 1e6, static_cast<double>(h.step_ns.max) / 1e6);
    if (c.per_step_usd) out += fmt::format("; cost per step {}", util::format_usd(*c.per_step_usd));
    out += "\n";
  } else {
    out += "steps: no ProfilerStep spans in this trace\n";
  }
  out += findings::to_text(c.findings);
  if (h.operators.empty()) {
    out += "\n";
    return;
  }
  std::int64_t self_total = 0;
  for (const auto& op : h.operators) self_total += op.self_ns;
  util::TextTable t;
  t.header({"operator (by self CPU time)", "count", "self ms", "total ms", "of self"},
           {util::TextTable::Align::left, util::TextTable::Align::right, util::TextTable::Align::right,
            util::TextTable::Align::right, util::TextTable::Align::right});
  std::vector<std::string> full_names;
  for (std::size_t i = 0; i < h.operators.size() && i < o.top; ++i) full_names.push_back(h.operators[i].name);
  const std::vector<std::string> display = trace::short_names(full_names, 60);
  std::size_t rows = 0;
  for (const auto& op : h.operators) {
    if (rows++ >= o.top) break;
    t.row({display[rows - 1], std::to_string(op.count), detail::ms_text(op.self_ns),
           detail::ms_text(op.total_ns), pct(op.self_ns, self_total)});
  }
  if (h.operators.size() > o.top)
    t.row({fmt::format("({} more)", h.operators.size() - o.top), "", "", "", ""});
  out += t.render();
  out += "\n";
}

}  // namespace

std::string trace_text(const PricedTrace& t, const TraceRenderOptions& o) {
  std::string out;
  if (t.price.micros_per_gpu_hour)
    out += fmt::format("price: {}/GPU-hour (source: {})\n\n",
                       util::format_micros(*t.price.micros_per_gpu_hour), t.price.source);
  else
    out += "price: none (pass --price USD_PER_GPU_HOUR for costs); figures in time only\n\n";
  out += job_text(t);
  std::set<std::string> groups;
  for (const auto& f : t.files) groups.insert(f.group);
  const std::string* current_group = nullptr;
  for (std::size_t fi = 0; fi < t.files.size(); ++fi) {
    const FileAnalysis& f = t.files[fi];
    const findings::FileCosts& fc = t.costs[fi];
    if (groups.size() > 1 && (current_group == nullptr || *current_group != f.group)) {
      out += fmt::format("=== {} ===\n\n", f.group);
      current_group = &f.group;
    }
    if (f.skipped) {
      out += fmt::format("{}: skipped, not a trace: {}\n\n", f.file, *f.skipped);
      continue;
    }
    if (f.partial)
      out += fmt::format("{}: PARTIAL — damaged file, figures cover only what parsed ({})\n", f.file,
                         f.partial_error);
    if (f.devices.empty()) {
      const std::string rank = f.rank ? fmt::format(" (rank {})", *f.rank) : "";
      if (f.partial)
        out += fmt::format(
            "{}{}: PARTIAL — the file is cut before its first GPU event: no GPU figures; the CPU "
            "figures below cover what parsed\n",
            f.file, rank);
      out +=
          fmt::format("{}{}: CPU only — no GPU activity in this trace (no kernel, memcpy or memset events)\n",
                      f.file, rank);
      if (f.host)
        host_text(out, f, *fc.host, o);
      else
        out += "no CPU operators either: nothing to report\n\n";
      continue;
    }
    for (std::size_t di = 0; di < f.devices.size(); ++di) {
      const DeviceAnalysis& d = f.devices[di];
      const DeviceCosts& c = fc.devices[di];
      out += device_label(f, d) + "\n";
      out += findings::to_text(c.findings);
      util::TextTable table;
      table.header({"", "ms", "of window", "cost"},
                   {util::TextTable::Align::left, util::TextTable::Align::right,
                    util::TextTable::Align::right, util::TextTable::Align::right});
      auto row = [&](const char* name, std::int64_t ns, const findings::UsdOrNone& usd) {
        table.row({name, detail::ms_text(ns), pct(ns, d.window_ns), util::format_usd_or(usd)});
      };
      row("window", d.window_ns, c.window_usd);
      row("  compute", d.compute_ns, c.compute_usd);
      row("  communication", d.communication_ns, c.communication_usd);
      row("  memory", d.memory_ns, c.memory_usd);
      row("  idle", d.idle_ns, c.idle_usd);
      row("    host wait", d.idle_host_wait_ns, c.idle_host_wait_usd);
      row("      host dispatching", d.idle_dispatch_ns, c.idle_dispatch_usd);
      row("      input wait", d.idle_input_ns, c.idle_input_usd);
      if (d.idle_host_sync_ns > 0) row("      in a sync call", d.idle_host_sync_ns, c.idle_host_sync_usd);
      row("    other", d.idle_other_ns, c.idle_other_usd);
      if (d.idle_in_graph_ns > 0) row("      inside CUDA graphs", d.idle_in_graph_ns, c.idle_in_graph_usd);
      row("comm/compute overlap", d.overlap_ns, c.overlap_usd);
      row("kernel time (Σ durations)", d.kernel_ns, c.kernel_usd);
      out += table.render();
      out += fmt::format("activities {} ({} zero-length), idle gaps {}", d.activity_count,
                         d.zero_length_count, d.idle_gap_count);
      if (f.skipped_events > 0)
        out += fmt::format(", {} GPU events without usable ts/dur skipped", f.skipped_events);
      out += "\n";
      if (!d.idle_cpu_ops.empty()) {
        out += "CPU work while the GPU was idle (outermost ops):";
        for (std::size_t i = 0; i < d.idle_cpu_ops.size() && i < 3; ++i)
          out += fmt::format("{} {} {} ms", i == 0 ? "" : ",", trace::short_name(d.idle_cpu_ops[i].name, 40),
                             detail::ms_text(d.idle_cpu_ops[i].overlap_ns));
        out += "\n";
      }
      if (d.before_window.count > 0) {
        out += fmt::format(
            "launched before the profiler's window: {} activities, {} ms of busy time ({}) queued by the CPU "
            "before recording began (no launch call in the trace); kept out of the op, annotation and step "
            "rows:",
            d.before_window.count, detail::ms_text(d.before_window.attributed_ns),
            pct(d.before_window.attributed_ns, d.busy_ns));
        for (std::size_t i = 0; i < d.before_window.kernels.size() && i < 3; ++i)
          out += fmt::format("{} {} {} ms", i == 0 ? "" : ",",
                             trace::short_name(d.before_window.kernels[i].name, 40),
                             detail::ms_text(d.before_window.kernels[i].attributed_ns));
        out += "\n";
      }
      if (d.graph_launches > 0)
        out += fmt::format(
            "CUDA graphs: {} graph launches; the {} ms idle between the kernels of one graph replay is the "
            "graph's own (not classifiable from the trace: no host event per kernel)\n",
            d.graph_launches, detail::ms_text(d.idle_in_graph_ns));
      if (d.steps_span && d.step_ns.count > 0)
        out += fmt::format("GPU time of the profiler's steps' work: {} ms for {} steps ({} ms per step)\n",
                           detail::ms_text(d.steps_span->span_ns), d.step_ns.count,
                           detail::ms_text(d.steps_span->span_ns / d.step_ns.count));
      if (d.launch_delay_ns.count > 0)
        out += fmt::format(
            "launch delay: mean {:.1f} us, p50 {:.1f} us, p95 {:.1f} us, max {:.1f} us; queue depth: "
            "mean {:.1f}, p95 {}, max {}\n",
            d.launch_delay_ns.mean / 1e3, static_cast<double>(d.launch_delay_ns.p50) / 1e3,
            static_cast<double>(d.launch_delay_ns.p95) / 1e3,
            static_cast<double>(d.launch_delay_ns.max) / 1e3, d.queue_depth.mean, d.queue_depth.p95,
            d.queue_depth.max);
      if (auto m = mean_step_ns(d)) {
        out += fmt::format(
            "steps: {}, step time mean {:.3f} ms (min {:.3f}, p50 {:.3f}, max {:.3f}, stdev {:.3f})",
            d.step_ns.count, *m / 1e6, static_cast<double>(d.step_ns.min) / 1e6,
            static_cast<double>(d.step_ns.p50) / 1e6, static_cast<double>(d.step_ns.max) / 1e6,
            d.step_ns.stdev / 1e6);
        if (c.per_step_usd) {
          out += fmt::format("\n  cost per step {} ; idle cost per 1k steps {}",
                             util::format_usd(*c.per_step_usd), util::format_usd(*c.idle_per_1k_steps_usd));
          if (c.projected_usd)
            out += fmt::format(" ; {} steps ≈ {}", *t.project_steps, util::format_usd(*c.projected_usd));
        }
        out += "\n";
      } else {
        out += "steps: no ProfilerStep spans in this trace\n";
      }
      out += "\n";
      if (shown(o, "kernel")) breakdown_text(out, "kernel", d.kernels, c.kernels, d, o, true);
      if (shown(o, "op")) breakdown_text(out, "operator", d.operators, c.operators, d, o, false);
      if (shown(o, "annotation"))
        breakdown_text(out, "annotation", d.annotations, c.annotations, d, o, false);
      if (shown(o, "step") && !d.steps.empty()) breakdown_text(out, "step", d.steps, c.steps, d, o, false);
    }
  }
  return out;
}

std::string trace_json(const PricedTrace& t) {
  nlohmann::json root;
  root["files"] = nlohmann::json::array();
  root["devices"] = nlohmann::json::array();
  const std::optional<MicroUsd>& price = t.price.micros_per_gpu_hour;
  for (std::size_t fi = 0; fi < t.files.size(); ++fi) {
    const FileAnalysis& f = t.files[fi];
    const findings::FileCosts& fc = t.costs[fi];
    nlohmann::json jf;
    jf["file"] = f.file;
    jf["group"] = f.group;
    jf["format"] = f.format.empty() ? nlohmann::json(nullptr) : nlohmann::json(f.format);
    jf["rank"] = json_or_null(f.rank);
    if (f.skipped)
      jf["skipped"] = *f.skipped;
    else
      jf["skipped"] = nullptr;
    jf["partial"] = f.partial;
    jf["partial_error"] = f.partial ? nlohmann::json(f.partial_error) : nlohmann::json(nullptr);
    jf["gpu_activity"] = !f.devices.empty();
    jf["note"] =
        (!f.skipped && f.devices.empty())
            ? nlohmann::json(f.partial ? "no GPU activity before the damage (PARTIAL)" : "no GPU activity")
            : nlohmann::json(nullptr);
    jf["host"] = host_json(f, fc);
    jf["bytes"] = f.bytes;
    jf["events"] = f.event_count;
    jf["skipped_gpu_events"] = f.skipped_events;
    root["files"].push_back(std::move(jf));
    for (std::size_t di = 0; di < f.devices.size(); ++di) {
      const DeviceAnalysis& d = f.devices[di];
      const DeviceCosts& c = fc.devices[di];
      nlohmann::json j;
      j["file"] = f.file;
      j["group"] = f.group;
      j["rank"] = json_or_null(f.rank);
      j["device"] = d.device;
      j["gpu_name"] = json_or_null(d.gpu_name);
      j["partial"] = f.partial;
      add_figures(j, d, kDeviceFigures);
      j["fair_share_exact"] = d.fair_share_exact;
      for (const auto& [key, cost] : kDeviceCosts) j[key] = json_or_null(c.*cost);
      j["price_usd_per_gpu_hour"] =
          price ? nlohmann::json(util::micros_to_usd(*price)) : nlohmann::json(nullptr);
      j["price_source"] = price ? nlohmann::json(t.price.source) : nlohmann::json(nullptr);
      j["step_count"] = d.step_ns.count;
      j["step_time_ns"] = stats_json(d.step_ns);
      j["cost_per_step_usd"] = json_or_null(c.per_step_usd);
      j["idle_cost_per_1k_steps_usd"] = json_or_null(c.idle_per_1k_steps_usd);
      j["projected_steps"] = json_or_null(t.project_steps);
      j["projected_cost_usd"] = json_or_null(c.projected_usd);
      auto ops_json = [](const std::vector<trace::IdleCpuOp>& v) {
        auto a = nlohmann::json::array();
        for (const auto& op : v)
          a.push_back({{"name", op.name}, {"count", op.count}, {"overlap_ns", op.overlap_ns}});
        return a;
      };
      j["idle_cpu_ops"] = ops_json(d.idle_cpu_ops);
      j["dispatch_cpu_ops"] = ops_json(d.dispatch_cpu_ops);
      j["longest_dispatch_gap_ns"] = d.longest_dispatch_gap_ns;
      j["longest_dispatch_gap_op"] = d.longest_dispatch_gap_op;
      j["input_frames"] = ops_json(d.input_frames);
      j["before_window"] = {
          {"count", d.before_window.count},
          {"kernel_ns", d.before_window.kernel_ns},
          {"attributed_ns", d.before_window.attributed_ns},
          {"cost_usd", json_or_null(c.before_window_usd)},
          {"kernels", buckets_json(d.before_window.kernels, c.before_window_kernels, true, false)}};
      auto matrix_math = nlohmann::json::object();
      add_figures(matrix_math, d.matrix_math, kMatrixMathFigures);
      j["matrix_math"] = std::move(matrix_math);
      j["steps_span"] = nullptr;
      if (d.steps_span)
        add_figures(j["steps_span"] = nlohmann::json::object(), *d.steps_span, kStepsSpanFigures);
      j["launch_delay_ns"] = stats_json(d.launch_delay_ns);
      j["queue_depth"] = stats_json(d.queue_depth);
      j["kernels"] = buckets_json(d.kernels, c.kernels, true, false);
      j["operators"] = buckets_json(d.operators, c.operators, false, false);
      j["annotations"] = buckets_json(d.annotations, c.annotations, false, false);
      j["steps"] = buckets_json(d.steps, c.steps, false, true);
      auto split = nlohmann::json::array();
      for (const auto& sp : d.step_split) {
        nlohmann::json one{{"name", sp.name}};
        split.push_back(std::move(add_figures(one, sp, kStepSplitFigures)));
      }
      j["step_split"] = std::move(split);
      j["findings"] = findings::to_json(c.findings);
      root["devices"].push_back(std::move(j));
    }
  }
  root["jobs"] = nlohmann::json::array();
  for (std::size_t i = 0; i < t.jobs.size(); ++i) root["jobs"].push_back(job_json(t.jobs[i], t.job_costs[i]));
  root["job"] = t.jobs.size() == 1 ? root["jobs"][0] : nlohmann::json(nullptr);
  return root.dump(2);
}

std::string trace_csv(const PricedTrace& t) {
  std::string out = "file,rank,device,breakdown,name,class,count,kernel_ns,attributed_ns,cost_usd\r\n";
  for (std::size_t fi = 0; fi < t.files.size(); ++fi) {
    const FileAnalysis& f = t.files[fi];
    for (std::size_t di = 0; di < f.devices.size(); ++di) {
      const DeviceAnalysis& d = f.devices[di];
      const DeviceCosts& c = t.costs[fi].devices[di];
      const std::string rank = f.rank ? std::to_string(*f.rank) : "";
      auto emit = [&](const char* kind, const std::vector<Bucket>& bs,
                      const std::vector<findings::UsdOrNone>& usd) {
        for (std::size_t i = 0; i < bs.size(); ++i) {
          const Bucket& b = bs[i];
          out += fmt::format("{},{},{},{},{},{},{},{},{},{}\r\n", util::csv_escape(f.file), rank,
                             util::csv_escape(d.device), kind, util::csv_escape(b.name), b.klass, b.count,
                             b.kernel_ns, b.attributed_ns, usd[i] ? fmt::format("{:.9f}", *usd[i]) : "");
        }
      };
      emit("summary",
           {Bucket{"window", "", d.activity_count, d.kernel_ns, d.window_ns, 0},
            Bucket{"busy", "", 0, 0, d.busy_ns, 0}, Bucket{"compute", "", 0, 0, d.compute_ns, 0},
            Bucket{"communication", "", 0, 0, d.communication_ns, 0},
            Bucket{"memory", "", 0, 0, d.memory_ns, 0}, Bucket{"idle", "", 0, 0, d.idle_ns, 0}},
           {c.window_usd, c.busy_usd, c.compute_usd, c.communication_usd, c.memory_usd, c.idle_usd});
      emit("kernel", d.kernels, c.kernels.attributed_usd);
      emit("operator", d.operators, c.operators.attributed_usd);
      emit("annotation", d.annotations, c.annotations.attributed_usd);
      emit("step", d.steps, c.steps.attributed_usd);
      emit("before_window", d.before_window.kernels, c.before_window_kernels.attributed_usd);
    }
  }
  return out;
}

}  // namespace gm::report
