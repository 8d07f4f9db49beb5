// Trace diff: per-step normalised time per class, kernel, operator and annotation, and the cost gate.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "trace/trace.h"

namespace gm::trace {
namespace {

/// One kernel, operator or annotation of one side.
struct Item {
  double ns = 0;            // fair-share time per step
  std::string klass;        // kernels
  std::int64_t count = 0;   // activities
  std::int64_t raw_ns = 0;  // Σ raw durations
};

/// One side, normalised: each device's figures divided by its number of steps (or 1), then summed.
struct Side {
  std::int64_t steps = 0, devices = 0;
  bool all_have_steps = true;
  std::map<std::string, double> summary;
  std::map<std::string, Item> kernels, operators, annotations;
  double busy = 0, window = 0;
};

void add_items(std::map<std::string, Item>& items, const std::vector<Bucket>& buckets, double div) {
  for (const auto& b : buckets) {
    auto& it = items[b.name];
    it.ns += static_cast<double>(b.attributed_ns) / div;
    it.klass = b.klass;
    it.count += b.count;
    it.raw_ns += b.kernel_ns;
  }
}

Side collect(const std::vector<FileAnalysis>& files, bool per_step) {
  Side s;
  for (const auto& f : files)
    for (const auto& d : f.devices) {
      ++s.devices;
      s.steps += d.step_ns.count;
      if (d.step_ns.count == 0) s.all_have_steps = false;
      const double div = per_step && d.step_ns.count > 0 ? static_cast<double>(d.step_ns.count) : 1.0;
      auto add = [&](const char* k, double ns) { s.summary[k] += ns / div; };
      // Per step: the GPU span of the work the profiler's steps launched (work queued before the window
      // and its lead-in left out); per trace: the whole window.
      if (per_step && d.steps_span) {
        const auto& sp = *d.steps_span;
        add("window", static_cast<double>(sp.span_ns));
        add("busy", static_cast<double>(sp.busy_ns));
        add("compute", static_cast<double>(sp.compute_ns));
        add("communication", static_cast<double>(sp.communication_ns));
        add("memory", static_cast<double>(sp.memory_ns));
        add("idle", static_cast<double>(sp.span_ns - sp.busy_ns));
      } else {
        add("window", static_cast<double>(d.window_ns));
        add("busy", static_cast<double>(d.busy_ns));
        add("compute", static_cast<double>(d.compute_ns));
        add("communication", static_cast<double>(d.communication_ns));
        add("memory", static_cast<double>(d.memory_ns));
        add("idle", static_cast<double>(d.idle_ns));
      }
      if (d.step_ns.count > 0) s.summary["step time"] += d.step_ns.mean;
      add_items(s.kernels, d.kernels, div);
      if (per_step)  // kernels launched before the window belong to no profiler step
        for (const auto& b : d.before_window.kernels) {
          auto& it = s.kernels[b.name];
          it.ns -= static_cast<double>(b.attributed_ns) / div;
          it.count -= b.count;
          it.raw_ns -= b.kernel_ns;
          if (it.count <= 0) s.kernels.erase(b.name);
        }
      add_items(s.operators, d.operators, div);
      add_items(s.annotations, d.annotations, div);
    }
  s.busy = s.summary["busy"];
  s.window = s.summary["window"];
  return s;
}

DiffRow row(const std::string& kind, const std::string& name, double base, double now, double base_total,
            double new_total) {
  DiffRow r;
  r.kind = kind;
  r.name = name;
  r.base_ns = base;
  r.new_ns = now;
  r.base_share = base_total > 0 ? base / base_total : 0;
  r.new_share = new_total > 0 ? now / new_total : 0;
  if (base > 0) r.change = (now - base) / base;
  if (base == 0 && now > 0)
    r.status = "new";
  else if (now == 0 && base > 0)
    r.status = "vanished";
  else if (r.change && *r.change > 1e-9)
    r.status = "up";
  else if (r.change && *r.change < -1e-9)
    r.status = "down";
  else
    r.status = "same";
  return r;
}

/// kind: "kernel" (both gate rules), "operator" (added-time rule), "annotation" (not gated).
std::vector<DiffRow> compare_items(const std::string& kind, const Side& base, const Side& now,
                                   const std::map<std::string, Item>& b_items,
                                   const std::map<std::string, Item>& n_items, const DiffOptions& o,
                                   std::vector<std::string>& failures) {
  std::vector<DiffRow> rows;
  std::map<std::string, int> names;
  for (const auto& [n, v] : b_items) names[n] = 0;
  for (const auto& [n, v] : n_items) names[n] = 0;
  static const Item none;
  for (const auto& [n, unused] : names) {
    auto bi = b_items.find(n);
    auto ni = n_items.find(n);
    const Item& b = bi == b_items.end() ? none : bi->second;
    const Item& w = ni == n_items.end() ? none : ni->second;
    DiffRow r = row(kind, n, b.ns, w.ns, base.busy, now.busy);
    r.klass = !w.klass.empty() ? w.klass : b.klass;
    if (kind != "annotation" && std::max(r.base_share, r.new_share) >= o.min_share) {
      r.gated = true;
      // Rule 1: the item's rise adds more than the threshold to the GPU work of a step.
      const double added = base.busy > 0 ? (w.ns - b.ns) / base.busy : 0;
      // Rule 2 (GPU kernels): it runs as often per step as before, each launch takes longer by more than
      // the threshold, and the extra time is at least min_share of the base busy time per step.
      bool slower_launches = false;
      double launch_change = 0;
      if (kind == "kernel" && r.klass != "memory" && b.count > 0 && w.count > 0 && b.raw_ns > 0 &&
          b.count * now.steps == w.count * base.steps) {
        launch_change = (static_cast<double>(w.raw_ns) / static_cast<double>(w.count)) /
                            (static_cast<double>(b.raw_ns) / static_cast<double>(b.count)) -
                        1.0;
        slower_launches = launch_change > o.max_increase && added >= o.min_share;
      }
      if (added > o.max_increase || slower_launches) {
        r.failed = true;
        std::string why = slower_launches && !(added > o.max_increase)
                              ? fmt::format("each launch {:+.1f}% slower", 100 * launch_change)
                              : fmt::format("+{:.1f}% of the base GPU busy time per step", 100 * added);
        failures.push_back(
            fmt::format("{} {}: +{:.3f} ms per step ({}), {} (limit +{:.1f}%)", kind, n, (w.ns - b.ns) / 1e6,
                        r.change ? fmt::format("{:+.1f}%", 100 * *r.change) : std::string("new"), why,
                        100 * o.max_increase));
      }
    }
    rows.push_back(std::move(r));
  }
  std::stable_sort(rows.begin(), rows.end(), [](const DiffRow& x, const DiffRow& y) {
    if (x.failed != y.failed) return x.failed;
    return std::abs(x.new_ns - x.base_ns) > std::abs(y.new_ns - y.base_ns);
  });
  return rows;
}

}  // namespace

Result<TraceDiff> diff_traces(const std::vector<FileAnalysis>& base, const std::vector<FileAnalysis>& now,
                              const DiffOptions& options) {
  Side probe_base = collect(base, false), probe_new = collect(now, false);
  if (probe_base.devices == 0) return make_error("BASE has no GPU activity: nothing to compare");
  if (probe_new.devices == 0) return make_error("NEW has no GPU activity: nothing to compare");
  const bool per_step = probe_base.all_have_steps && probe_new.all_have_steps;
  Side b = collect(base, per_step), n = collect(now, per_step);
  if (!per_step) b.steps = n.steps = 1;  // launch counts compared per trace
  TraceDiff d;
  d.per = per_step ? "step" : "trace";
  d.base_steps = per_step ? b.steps : probe_base.steps;
  d.new_steps = per_step ? n.steps : probe_new.steps;
  d.base_devices = b.devices;
  d.new_devices = n.devices;
  for (const char* k : {"window", "busy", "compute", "communication", "memory", "idle", "step time"}) {
    if (!b.summary.contains(k) && !n.summary.contains(k)) continue;
    DiffRow r = row("summary", k, b.summary[k], n.summary[k], b.window, n.window);
    if (std::string(k) == "window") {
      r.gated = true;
      if (r.change && *r.change > options.max_increase) {
        r.failed = true;
        d.failures.push_back(fmt::format("cost per {}: {:+.1f}% (limit +{:.1f}%)", d.per, 100 * *r.change,
                                         100 * options.max_increase));
      }
    }
    d.summary.push_back(std::move(r));
  }
  d.kernels = compare_items("kernel", b, n, b.kernels, n.kernels, options, d.failures);
  d.operators = compare_items("operator", b, n, b.operators, n.operators, options, d.failures);
  d.annotations = compare_items("annotation", b, n, b.annotations, n.annotations, options, d.failures);
  d.pass = d.failures.empty();
  return d;
}

}  // namespace gm::trace
