#include "report/top_render.h"

#include <fmt/format.h>

#include <algorithm>

#include "util/enum_text.h"
#include "util/table.h"
#include "util/units.h"

namespace gm::report {

namespace {

constexpr util::EnumText<TopSort> kSortNames[] = {{TopSort::rate, "$/h"},
                                                  {TopSort::cost, "$ so far"},
                                                  {TopSort::owner, "owner"},
                                                  {TopSort::energy, "energy"}};

struct OwnerRow {
  sys::Owner owner;
  MicroUsd micros_per_hour = 0, cost = 0;
  double energy_j = 0;
  std::string gpus;
  std::vector<findings::Finding> findings;
};

}  // namespace

void TopHistory::update(const agent::Snapshot& s, std::int64_t now_ns) {
  if (s.self.collections == collections_) return;  // nothing new since the last frame
  collections_ = s.self.collections;
  const std::int64_t dt_ns = last_ns_ > 0 ? now_ns - last_ns_ : 0;
  last_ns_ = now_ns;
  for (const auto& d : s.devices) {
    Series& h = devices_[d.info.index];
    const bool ok = d.last && d.last->state == gpu::DeviceState::ok;
    push(h.util,
         ok && d.last->utilization_pct ? std::optional<double>(*d.last->utilization_pct) : std::nullopt);
    const MicroUsd used = meter::attributed_micros(d.cost, d.unallocated_cost);
    std::optional<double> rate;
    if (d.price && dt_ns > 0 && h.have_used)
      rate =
          util::micros_to_usd(meter::micros_per_hour(meter::cost_between_micros(used, h.last_used), dt_ns));
    if (d.price && (dt_ns > 0 || !h.have_used)) {
      h.last_used = used;
      h.have_used = true;
    }
    if (dt_ns > 0) push(h.used_usd_per_hour, rate);
  }
}

std::vector<std::string> TopHistory::lines(const agent::Snapshot& s) const {
  std::vector<std::string> out;
  for (const auto& d : s.devices) {
    auto it = devices_.find(d.info.index);
    if (it == devices_.end()) continue;
    const Series& h = it->second;
    double top_rate = d.price ? d.price->usd_per_gpu_hour() : 0;
    for (const auto& v : h.used_usd_per_hour)
      if (v) top_rate = std::max(top_rate, *v);
    out.push_back(fmt::format("{:<4}util {:<{}} {:>5}   $/h used {:<{}} {}", d.info.index,
                              spark(h.util, 100.0), kPoints, last_percent(h.util),
                              spark(h.used_usd_per_hour, top_rate), kPoints,
                              d.price ? last_usd(h.used_usd_per_hour) : "n/a"));
  }
  return out;
}

std::string TopHistory::spark(const std::deque<std::optional<double>>& q, double max) {
  static constexpr std::string_view kLevels = " ._-=+*#%@";
  std::string out;
  for (const auto& v : q) {
    if (!v) {
      out.push_back('?');
      continue;
    }
    const double f = max > 0 ? std::clamp(*v / max, 0.0, 1.0) : 0.0;
    out.push_back(kLevels[static_cast<std::size_t>(std::lround(f * (kLevels.size() - 1)))]);
  }
  return out;
}

std::string TopHistory::last_percent(const std::deque<std::optional<double>>& q) {
  return q.empty() || !q.back() ? "n/a" : fmt::format("{:.0f}%", *q.back());
}

std::string TopHistory::last_usd(const std::deque<std::optional<double>>& q) {
  return q.empty() ? "n/a" : util::format_usd_or(q.back(), "n/a");
}

void TopHistory::push(std::deque<std::optional<double>>& q, std::optional<double> v) {
  q.push_back(v);
  if (q.size() > kPoints) q.pop_front();
}

std::vector<std::string> render_top_lines(const agent::Snapshot& s, TopSort key, bool interactive,
                                          const TopHistory& history) {
  std::vector<std::string> out;
  MicroUsd rate = 0, spent = 0;
  for (const auto& d : s.devices)
    if (d.price) {
      rate += d.price->micros_per_gpu_hour;
      spent += d.cost;
    }
  out.push_back(fmt::format("gpumeter top - {} GPU(s) - {}/h - {} so far - sorted by {}{}", s.devices.size(),
                            util::format_micros(rate), util::format_micros(spent),
                            util::enum_text(kSortNames, key),
                            interactive ? "   [r]ate [c]ost [o]wner [e]nergy [q]uit" : ""));
  out.emplace_back();
  // UNALLOCATED: no process on the GPU; IDLE HELD: processes hold it (memory in use) while it is under the
  // idle threshold: a waiting kernel or a stuck job.
  out.push_back(fmt::format("{:<4}{:<26}{:<13}{:>6}{:>8}{:>12}{:>8}{:>11}{:>12}{:>13}{:>11}", "GPU", "MODEL",
                            "STATE", "UTIL", "TENSOR", "MEMORY", "POWER", "$/h", "$ SO FAR", "UNALLOCATED",
                            "IDLE HELD"));
  for (const auto& d : s.devices) {
    const bool ok = d.last && d.last->state == gpu::DeviceState::ok;
    const auto& l = d.last;
    // TENSOR: GPM's tensor-core activity ("-": the GPU has no GPM, Hopper and newer do).
    out.push_back(
        fmt::format("{:<4}{:<26}{:<13}{:>6}{:>8}{:>12}{:>8}{:>11}{:>12}{:>13}{:>11}", d.info.index,
                    util::shorten_middle(d.info.name, 25), l ? to_string(l->state) : "starting",
                    ok && l->utilization_pct ? fmt::format("{}%", *l->utilization_pct) : "n/a",
                    ok && l->gpm.tensor_active_pct ? fmt::format("{:.0f}%", *l->gpm.tensor_active_pct) : "-",
                    ok && l->memory_used_bytes ? util::format_bytes(*l->memory_used_bytes) : "n/a",
                    ok && l->power_mw ? fmt::format("{:.0f} W", *l->power_mw / 1000.0) : "n/a",
                    d.price ? util::format_micros(d.price->micros_per_gpu_hour) : "n/a",
                    d.price ? util::format_micros(d.cost) : "n/a",
                    d.price ? util::format_micros(d.unallocated_cost) : "n/a",
                    d.price && d.caps.utilization ? util::format_micros(d.idle_held_cost) : "n/a"));
  }
  out.emplace_back();
  out.push_back(
      fmt::format("HISTORY (last {} intervals, oldest left; ? = not readable)", TopHistory::kPoints));
  for (auto& l : history.lines(s)) out.push_back(std::move(l));
  std::vector<OwnerRow> list;
  for (const agent::OwnerTotal& t : agent::owner_totals(s)) {
    OwnerRow r;
    r.owner = t.owner;
    r.cost = t.cost;
    r.micros_per_hour = t.micros_per_hour;
    r.energy_j = t.energy_j;
    for (unsigned g : t.gpus) r.gpus += (r.gpus.empty() ? "" : ",") + std::to_string(g);
    r.findings = agent::owner_findings(t);
    list.push_back(std::move(r));
  }
  std::stable_sort(list.begin(), list.end(), [key](const OwnerRow& a, const OwnerRow& b) {
    switch (key) {
      case TopSort::rate:
        return a.micros_per_hour > b.micros_per_hour;
      case TopSort::cost:
        return a.cost > b.cost;
      case TopSort::energy:
        return a.energy_j > b.energy_j;
      case TopSort::owner:
        return a.owner.name < b.owner.name;
    }
    return false;
  });
  out.emplace_back();
  out.push_back(fmt::format("{:<11}{:<30}{:<14}{:<10}{:<7}{:>11}{:>12}{:>12}", "KIND", "OWNER", "NAMESPACE",
                            "USER", "GPUS", "$/h", "$ SO FAR", "ENERGY"));
  for (const auto& r : list)
    out.push_back(
        fmt::format("{:<11}{:<30}{:<14}{:<10}{:<7}{:>11}{:>12}{:>12}", to_string(r.owner.kind),
                    util::shorten_middle(r.owner.name, 29), util::shorten_middle(r.owner.pod_namespace, 13),
                    util::shorten_middle(r.owner.user, 9), r.gpus, util::format_micros(r.micros_per_hour),
                    util::format_micros(r.cost), fmt::format("{:.1f} kJ", r.energy_j / 1000.0)));
  if (list.empty()) out.push_back("(no processes on any GPU)");
  bool heading = false;
  for (const auto& r : list)
    for (const auto& f : r.findings) {
      if (!heading) {
        out.emplace_back();
        out.push_back("FINDINGS (since top started)");
        heading = true;
      }
      std::string money;
      if (f.nano_usd_per_month)
        money = fmt::format(" - {}/month at this rate", util::format_nanos(*f.nano_usd_per_month));
      out.push_back(fmt::format("[{}] {} {}: {}{}", findings::severity_name(f.severity), f.kind,
                                util::shorten_middle(r.owner.name, 40), f.summary, money));
      out.push_back("    -> " + f.action);
    }
  return out;
}

}  // namespace gm::report
