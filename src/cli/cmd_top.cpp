// gpumeter top: a live terminal view of devices and owners with $/h and $ so far (ncurses); plain text once
// when stdout is not a terminal.
#include <curses.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <optional>
#include <thread>

#include "agent/agent.h"
#include "cli/agent_node.h"
#include "cli/agent_setup.h"
#include "cli/cli.h"
#include "cli/common.h"
#include "report/top_render.h"

namespace gm::cli {

namespace {

int interactive_view(agent::Collector& collector, std::int64_t interval_ms, report::TopSort key,
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
  report::TopHistory history;
  while (true) {
    const auto snapshot = collector.snapshot();
    history.update(snapshot, util::system_clock().monotonic_ns());
    auto lines = report::render_top_lines(snapshot, key, true, history);
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
    if (ch == 'r') key = report::TopSort::rate;
    if (ch == 'c') key = report::TopSort::cost;
    if (ch == 'o') key = report::TopSort::owner;
    if (ch == 'e') key = report::TopSort::energy;
  }
  endwin();
  stop.request();
  worker.join();
  asker.join();
  return util::kExitOk;
}

}  // namespace

int cmd_top(int argc, char** argv) {
  CLI::App app("live view of devices and owners with $/h and $ so far", "top");
  meter::PricingOptions pricing;
  add_pricing_flags(app, pricing);
  std::string interval = "1s", sort = "rate";
  OwnerFlags owner_flags;
  bool once = false;
  app.add_option("--interval", interval, "refresh interval (default 1s)");
  app.add_option("--sort", sort, "owner order: rate, cost, owner, energy")
      ->check(CLI::IsMember({"rate", "cost", "owner", "energy"}));
  add_owner_flags(app, owner_flags);
  app.add_flag("--once", once,
               "print one plain-text view and exit (the default when stdout is not a terminal)");
  std::string agent_listen = "127.0.0.1:9835";
  app.add_option("--agent", agent_listen, "the local agent whose autostop countdown to show (HOST:PORT)");
  if (auto rc = parse_args(app, argc, argv)) return *rc;
  auto interval_ms = parse_interval_flag(interval);
  if (!interval_ms) return fail("top", interval_ms.error());
  const report::TopSort key = sort == "cost"     ? report::TopSort::cost
                              : sort == "owner"  ? report::TopSort::owner
                              : sort == "energy" ? report::TopSort::energy
                                                 : report::TopSort::rate;

  auto devices = open_priced_devices(pricing);
  if (!devices) return fail("top", devices.error());
  auto& backend = devices->backend;
  agent::AgentOptions opts;
  opts.interval_ms = *interval_ms;
  sys::OwnerResolver resolver(owner_flags.owners);
  PodResourcesSetup pod_resources(owner_flags.pod_resources_socket, util::system_clock());
  agent::Collector collector(*backend, resolver, util::system_clock(), devices->prices, opts,
                             pod_resources.cache());

  if (once || !stdout_is_tty()) {
    report::TopHistory history;
    collector.collect_once();
    history.update(collector.snapshot(), util::system_clock().monotonic_ns());
    util::system_clock().sleep_ns(*interval_ms * 1'000'000);
    collector.collect_once();
    history.update(collector.snapshot(), util::system_clock().monotonic_ns());
    auto lines = report::render_top_lines(collector.snapshot(), key, false, history);
    if (auto autostop = agent::autostop_text(agent_listen, 300))
      lines.insert(lines.begin() + (lines.empty() ? 0 : 1), "AGENT  " + *autostop);
    for (const auto& l : lines) std::printf("%s\n", l.c_str());
    return util::kExitOk;
  }
  return interactive_view(collector, *interval_ms, key, agent_listen);
}

}  // namespace gm::cli
