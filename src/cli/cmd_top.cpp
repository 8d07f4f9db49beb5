// gpumeter top: a live terminal view of devices and owners with $/h and $ so far (ncurses); plain text once
// when stdout is not a terminal.
#include <curses.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>

#include "agent/agent.h"
#include "cli/agent_node.h"
#include "cli/agent_setup.h"
#include "cli/cli.h"
#include "cli/common.h"
#include "util/table.h"
#include "util/units.h"

namespace gm::cli {

namespace {

enum class SortKey { rate, cost, owner, energy };

const char* sort_name(SortKey k) {
  switch (k) {
    case SortKey::rate: return "$/h";
    case SortKey::cost: return "$ so far";
    case SortKey::owner: return "owner";
    case SortKey::energy: return "energy";
  }
  return "";
}

struct OwnerRow {
  Owner owner;
  MicroUsd micros_per_hour = 0, cost = 0;
  double energy_j = 0;
  std::string gpus;
  std::vector<findings::Finding> findings;
};

/// The last samples of each device, for the history lines: utilization and the $/h its processes used.
class TopHistory {
 public:
  static constexpr std::size_t kPoints = 40;
  void update(const agent::Snapshot& s, std::int64_t now_ns) {
    if (s.self.collections == collections_) return;  // nothing new since the last frame
    collections_ = s.self.collections;
    const std::int64_t dt_ns = last_ns_ > 0 ? now_ns - last_ns_ : 0;
    last_ns_ = now_ns;
    for (const auto& d : s.devices) {
      Series& h = devices_[d.info.index];
      const bool ok = d.last && d.last->state == DeviceState::ok;
      push(h.util,
           ok && d.last->utilization_pct ? std::optional<double>(*d.last->utilization_pct) : std::nullopt);
      const MicroUsd used = d.cost - d.unallocated_cost;
      std::optional<double> rate;
      if (d.price && dt_ns > 0 && h.have_used)
        rate = micros_to_usd(micros_per_hour(used - h.last_used, dt_ns));
      if (d.price && (dt_ns > 0 || !h.have_used)) {
        h.last_used = used;
        h.have_used = true;
      }
      if (dt_ns > 0) push(h.used_usd_per_hour, rate);
    }
  }
  /// "GPU n  util <sparkline> now  $/h used <sparkline> now" per device.
  std::vector<std::string> lines(const agent::Snapshot& s) const {
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

 private:
  struct Series {
    std::deque<std::optional<double>> util, used_usd_per_hour;
    MicroUsd last_used = 0;
    bool have_used = false;
  };
  static void push(std::deque<std::optional<double>>& q, std::optional<double> v) {
    q.push_back(v);
    if (q.size() > kPoints) q.pop_front();
  }
  /// ASCII levels (a terminal without UTF-8 draws them too); '?' where the value was not readable.
  static std::string spark(const std::deque<std::optional<double>>& q, double max) {
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
  static std::string last_percent(const std::deque<std::optional<double>>& q) {
    return q.empty() || !q.back() ? "n/a" : fmt::format("{:.0f}%", *q.back());
  }
  static std::string last_usd(const std::deque<std::optional<double>>& q) {
    return q.empty() || !q.back() ? "n/a" : format_usd(*q.back());
  }
  std::map<unsigned, Series> devices_;
  std::uint64_t collections_ = 0;
  std::int64_t last_ns_ = 0;
};

/// The screen as lines of text, for both the curses view and the plain output.
std::vector<std::string> render_lines(const agent::Snapshot& s, SortKey key, bool interactive,
                                      const TopHistory& history) {
  std::vector<std::string> out;
  MicroUsd rate = 0, spent = 0;
  for (const auto& d : s.devices)
    if (d.price) {
      rate += d.price->micros_per_gpu_hour;
      spent += d.cost;
    }
  out.push_back(fmt::format("gpumeter top - {} GPU(s) - {}/h - {} so far - sorted by {}{}", s.devices.size(),
                            format_micros(rate), format_micros(spent), sort_name(key),
                            interactive ? "   [r]ate [c]ost [o]wner [e]nergy [q]uit" : ""));
  out.emplace_back();
  out.push_back(fmt::format("{:<4}{:<26}{:<13}{:>6}{:>8}{:>12}{:>8}{:>11}{:>12}{:>13}", "GPU", "MODEL",
                            "STATE", "UTIL", "TENSOR", "MEMORY", "POWER", "$/h", "$ SO FAR", "UNALLOCATED"));
  for (const auto& d : s.devices) {
    const bool ok = d.last && d.last->state == DeviceState::ok;
    const auto& l = d.last;
    // TENSOR: GPM's tensor-core activity ("-": the GPU has no GPM, Hopper and newer do).
    out.push_back(fmt::format(
        "{:<4}{:<26}{:<13}{:>6}{:>8}{:>12}{:>8}{:>11}{:>12}{:>13}", d.info.index,
        shorten_middle(d.info.name, 25), l ? to_string(l->state) : "starting",
        ok && l->utilization_pct ? fmt::format("{}%", *l->utilization_pct) : "n/a",
        ok && l->gpm.tensor_active_pct ? fmt::format("{:.0f}%", *l->gpm.tensor_active_pct) : "-",
        ok && l->memory_used_bytes ? format_bytes(*l->memory_used_bytes) : "n/a",
        ok && l->power_mw ? fmt::format("{:.0f} W", *l->power_mw / 1000.0) : "n/a",
        d.price ? format_micros(d.price->micros_per_gpu_hour) : "n/a",
        d.price ? format_micros(d.cost) : "n/a", d.price ? format_micros(d.unallocated_cost) : "n/a"));
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
      case SortKey::rate:
        return a.micros_per_hour > b.micros_per_hour;
      case SortKey::cost:
        return a.cost > b.cost;
      case SortKey::energy: return a.energy_j > b.energy_j;
      case SortKey::owner: return a.owner.name < b.owner.name;
    }
    return false;
  });
  out.emplace_back();
  out.push_back(fmt::format("{:<11}{:<30}{:<14}{:<10}{:<7}{:>11}{:>12}{:>12}", "KIND", "OWNER", "NAMESPACE", "USER",
                            "GPUS", "$/h", "$ SO FAR", "ENERGY"));
  for (const auto& r : list)
    out.push_back(fmt::format("{:<11}{:<30}{:<14}{:<10}{:<7}{:>11}{:>12}{:>12}", to_string(r.owner.kind),
                              shorten_middle(r.owner.name, 29), shorten_middle(r.owner.pod_namespace, 13),
                              shorten_middle(r.owner.user, 9), r.gpus, format_micros(r.micros_per_hour),
                              format_micros(r.cost), fmt::format("{:.1f} kJ", r.energy_j / 1000.0)));
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
        money = fmt::format(" - {}/month at this rate",
                            format_usd(static_cast<double>(*f.nano_usd_per_month) / 1e9));
      out.push_back(fmt::format("[{}] {} {}: {}{}", findings::severity_name(f.severity), f.kind,
                                shorten_middle(r.owner.name, 40), f.summary, money));
      out.push_back("    -> " + f.action);
    }
  return out;
}

int interactive_view(agent::Collector& collector, std::int64_t interval_ms, SortKey key,
                     const std::string& agent_listen) {
  agent::StopSignal stop;
  std::thread worker([&] { collector.run(stop); });
  // The local agent's autostop countdown, asked every 5 s off the drawing thread (a slow agent never
  // stalls the view).
  std::mutex autostop_mu;
  std::optional<std::string> autostop;
  std::thread asker([&] {
    while (!stop.requested()) {
      auto text = agent::autostop_text(agent_listen, 300);
      {
        std::lock_guard<std::mutex> lock(autostop_mu);
        autostop = std::move(text);
      }
      if (stop.wait_ns(5'000'000'000)) break;
    }
  });
  initscr();
  cbreak();
  noecho();
  curs_set(0);
  keypad(stdscr, TRUE);
  timeout(static_cast<int>(std::min<std::int64_t>(interval_ms, 500)));
  TopHistory history;
  while (true) {
    const auto snapshot = collector.snapshot();
    history.update(snapshot, system_clock().monotonic_ns());
    auto lines = render_lines(snapshot, key, true, history);
    {
      std::lock_guard<std::mutex> lock(autostop_mu);
      if (autostop) lines.insert(lines.begin() + (lines.empty() ? 0 : 1), "AGENT  " + *autostop);
    }
    erase();
    int row = 0;
    for (const auto& l : lines) {
      if (row >= LINES) break;
      if (row == 0 || l.rfind("GPU ", 0) == 0 || l.rfind("KIND", 0) == 0 || l.rfind("HISTORY", 0) == 0 ||
          l.rfind("FINDINGS", 0) == 0)
        attron(A_BOLD);
      mvaddnstr(row++, 0, l.c_str(), COLS);
      attroff(A_BOLD);
    }
    refresh();
    const int ch = getch();
    if (ch == 'q' || ch == 'Q' || ch == 27) break;
    if (ch == 'r') key = SortKey::rate;
    if (ch == 'c') key = SortKey::cost;
    if (ch == 'o') key = SortKey::owner;
    if (ch == 'e') key = SortKey::energy;
  }
  endwin();
  stop.request();
  worker.join();
  asker.join();
  return kExitOk;
}

}  // namespace

int cmd_top(int argc, char** argv) {
  CLI::App app("live view of devices and owners with $/h and $ so far", "top");
  PricingOptions pricing;
  add_pricing_flags(app, pricing);
  std::string interval = "1s", sort = "rate";
  OwnerFlags owner_flags;
  bool once = false;
  app.add_option("--interval", interval, "refresh interval (default 1s)");
  app.add_option("--sort", sort, "owner order: rate, cost, owner, energy")->check(CLI::IsMember({"rate", "cost", "owner", "energy"}));
  add_owner_flags(app, owner_flags);
  app.add_flag("--once", once, "print one plain-text view and exit (the default when stdout is not a terminal)");
  std::string agent_listen = "127.0.0.1:9835";
  app.add_option("--agent", agent_listen, "the local agent whose autostop countdown to show (HOST:PORT)");
  if (auto rc = parse_args(app, argc, argv)) return *rc;
  auto interval_ms = parse_interval_flag(interval);
  if (!interval_ms) return fail("top", interval_ms.error());
  const SortKey key = sort == "cost" ? SortKey::cost : sort == "owner" ? SortKey::owner : sort == "energy" ? SortKey::energy : SortKey::rate;

  auto backend = open_gpu_backend();
  if (!backend) return fail("top", backend.error());
  auto prices = agent_prices(pricing, **backend);
  if (!prices) return fail("top", prices.error());
  agent::AgentOptions opts;
  opts.interval_ms = *interval_ms;
  OwnerResolver resolver(owner_flags.owners);
  PodResourcesSetup pod_resources(owner_flags.pod_resources_socket, system_clock());
  agent::Collector collector(**backend, resolver, system_clock(), *prices, opts, pod_resources.cache());

  if (once || !stdout_is_tty()) {
    TopHistory history;
    collector.collect_once();
    history.update(collector.snapshot(), system_clock().monotonic_ns());
    system_clock().sleep_ns(*interval_ms * 1'000'000);
    collector.collect_once();
    history.update(collector.snapshot(), system_clock().monotonic_ns());
    auto lines = render_lines(collector.snapshot(), key, false, history);
    if (auto autostop = agent::autostop_text(agent_listen, 300))
      lines.insert(lines.begin() + (lines.empty() ? 0 : 1), "AGENT  " + *autostop);
    for (const auto& l : lines) std::printf("%s\n", l.c_str());
    return kExitOk;
  }
  return interactive_view(collector, *interval_ms, key, agent_listen);
}

}  // namespace gm::cli
