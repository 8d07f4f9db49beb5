// The agent's node guard on made-up collections: autostop on idle and never while busy, node and owner
// budgets (the run's BudgetGuard per period, notify and stop actions, SIGKILL after the grace), notices.
#include "agent/node_guard.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "support/fakes.h"

namespace gm::agent {
namespace {

constexpr std::int64_t kS = 1'000'000'000;
constexpr std::int64_t kDayMs = 86'400'000;

NodeInput idle_input(std::int64_t t_s) {
  NodeInput in;
  in.now_ns = t_s * kS;
  in.unix_ms = 20'000 * kDayMs + t_s * 1000;
  in.gpus = {NodeGpu{0.0, 0, {}}, NodeGpu{2.0, 0, {}}};
  return in;
}

std::vector<std::string> kinds(const std::vector<NodeEvent>& events) {
  std::vector<std::string> out;
  for (const auto& e : events) out.push_back(e.kind);
  return out;
}

TEST(NodeBudgetParseTest, NodeAndOwnerBudgets) {
  auto n = parse_node_budget("200/day");
  ASSERT_TRUE(n);
  EXPECT_EQ(n->limit_micros, 200'000'000);
  EXPECT_EQ(n->scope(), "node");
  auto o = parse_owner_budget("namespace:ml=900/month,stop");
  ASSERT_TRUE(o) << o.error().message;
  EXPECT_EQ(o->kind, "namespace");
  EXPECT_EQ(o->name, "ml");
  EXPECT_EQ(o->period, store::BudgetPeriod::month);
  EXPECT_TRUE(o->stop);
  EXPECT_EQ(o->scope(), "namespace:ml");
  for (const char* bad : {"200", "200/week", "-5/day", "abc/day"}) {
    auto r = parse_node_budget(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_NE(r.error().message.find("--node-budget"), std::string::npos);
  }
  for (const char* bad : {"alice=5/day", "group:x=5/day", "user:alice=5/day,kill", "user:=5/day"}) {
    auto r = parse_owner_budget(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_NE(r.error().message.find("--owner-budget"), std::string::npos) << r.error().message;
  }
  sys::Owner alice;
  alice.user = "alice";
  alice.slurm_account = "physics";
  EXPECT_TRUE(budget_matches(*parse_owner_budget("user:alice=1/day"), alice));
  EXPECT_TRUE(budget_matches(*parse_owner_budget("slurm-account:physics=1/day"), alice));
  EXPECT_FALSE(budget_matches(*parse_owner_budget("user:bob=1/day"), alice));
}

TEST(NodeGuardTest, AutostopWarnsThenRunsTheCommandOnceAfterTheIdleSpell) {
  test::RecordingRunner runner;
  std::atomic<int> ran{0};
  std::string command;
  NodeGuardConfig cfg;
  cfg.autostop_idle_ms = 100'000;
  cfg.autostop_command = "touch /tmp/x";
  NodeGuard guard(cfg, runner, [&](const std::string& cmd, const guard::GuardEvent& e) -> Result<void> {
    if (e.kind == "autostop") {
      command = cmd;
      ++ran;
    }
    return ok_result();
  });
  std::vector<std::string> seen;
  for (int t = 0; t <= 130; ++t) {
    auto k = kinds(guard.step(idle_input(t)));
    seen.insert(seen.end(), k.begin(), k.end());
    if (t == 50) {
      EXPECT_DOUBLE_EQ(*guard.status().autostop_remaining_s, 50.0);
    }
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"autostop_warning", "autostop"}));
  for (int i = 0; i < 100 && ran.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(ran.load(), 1);
  EXPECT_EQ(command, "touch /tmp/x");
  EXPECT_DOUBLE_EQ(*guard.status().autostop_remaining_s, 0.0);
  EXPECT_EQ(guard.status().events.at("autostop"), 1u);
}

TEST(NodeGuardTest, NeverWhileAnyGpuIsBusyAndBusyResetsTheCountdown) {
  test::RecordingRunner runner;
  std::atomic<int> ran{0};
  NodeGuardConfig cfg;
  cfg.autostop_idle_ms = 10'000;
  cfg.autostop_command = "shutdown -h now";
  NodeGuard guard(cfg, runner, [&](const std::string&, const guard::GuardEvent&) -> Result<void> {
    ++ran;
    return ok_result();
  });
  for (int t = 0; t < 100; ++t) {
    NodeInput in = idle_input(t);
    if (t % 9 == 8) in.gpus[1].utilization_pct = 40;  // busy now and then
    if (t % 9 == 4) in.gpus[0].processes = 1;         // a compute process at 0 %
    if (t == 50) in.gpus[0].utilization_pct.reset();  // unreadable: not idle
    for (const auto& e : guard.step(in)) {
      EXPECT_NE(e.kind, "autostop") << t;
    }
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(ran.load(), 0);
  EXPECT_GT(*guard.status().autostop_remaining_s, 0.0);
}

TEST(NodeGuardTest, DryRunRunsNothing) {
  test::RecordingRunner runner;
  std::atomic<int> ran{0};
  NodeGuardConfig cfg;
  cfg.autostop_idle_ms = 5'000;
  cfg.autostop_dry_run = true;
  NodeGuard guard(cfg, runner, [&](const std::string&, const guard::GuardEvent&) -> Result<void> {
    ++ran;
    return ok_result();
  });
  std::vector<std::string> seen;
  for (int t = 0; t <= 10; ++t) {
    auto k = kinds(guard.step(idle_input(t)));
    seen.insert(seen.end(), k.begin(), k.end());
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"autostop_dry_run"}));
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_EQ(ran.load(), 0);
}

TEST(NodeGuardTest, OwnerBudgetStopsOnlyThatOwnersProcessesThenKillsAfterGraceAndResetsNextDay) {
  test::RecordingRunner runner;
  NodeGuardConfig cfg;
  cfg.budgets = {*parse_owner_budget("user:alice=10/day,stop"), *parse_node_budget("100/day")};
  cfg.grace_ms = 5'000;
  NodeGuard guard(cfg, runner, nullptr);
  sys::Owner alice, bob;
  alice.user = "alice";
  bob.user = "bob";
  auto input = [&](std::int64_t t_s, MicroUsd alice_cost, MicroUsd bob_cost, std::int64_t day) {
    NodeInput in;
    in.now_ns = t_s * kS;
    in.unix_ms = day * kDayMs + 3'600'000 + t_s * 1000;
    in.gpus = {NodeGpu{90.0, 2, {}}};
    in.node_cost_micros = alice_cost + bob_cost;
    in.owner_costs = {{alice, alice_cost}, {bob, bob_cost}};
    in.gpu_processes = {{101, alice}, {202, bob}};
    return in;
  };
  // The agent starts with $50 already on alice's counters: that spend is before this period's baseline.
  EXPECT_TRUE(guard.step(input(0, 50'000'000, 0, 20'000)).empty());
  EXPECT_EQ(kinds(guard.step(input(1, 58'500'000, 0, 20'000))), (std::vector<std::string>{"budget_warn"}));
  EXPECT_EQ(kinds(guard.step(input(2, 60'000'000, 0, 20'000))), (std::vector<std::string>{"budget_stop"}));
  ASSERT_EQ(runner.sent.size(), 1u);
  EXPECT_EQ(runner.sent[0].pid, 101);
  EXPECT_EQ(runner.sent[0].sig, SIGTERM);
  EXPECT_TRUE(guard.step(input(6, 61'000'000, 0, 20'000)).empty());
  EXPECT_EQ(kinds(guard.step(input(7, 61'000'000, 0, 20'000))), (std::vector<std::string>{"sigkill"}));
  ASSERT_EQ(runner.sent.size(), 2u);
  EXPECT_EQ(runner.sent[1].sig, SIGKILL);
  EXPECT_EQ(runner.sent[1].pid, 101);
  const auto st = guard.status();
  ASSERT_EQ(st.budgets.size(), 2u);
  EXPECT_EQ(st.budgets[0].scope, "user:alice");
  EXPECT_EQ(st.budgets[0].spent_micros, 11'000'000);
  // The node budget only notifies.
  auto k = kinds(guard.step(input(8, 61'000'000, 100'000'000, 20'000)));
  EXPECT_EQ(k, (std::vector<std::string>{"budget_warn", "budget_over"}));
  EXPECT_EQ(runner.sent.size(), 2u) << "the node budget never signals";
  // A new day: the budget counts from zero again.
  EXPECT_TRUE(guard.step(input(9, 62'000'000, 100'000'000, 20'001)).empty());
  EXPECT_EQ(guard.status().budgets[0].spent_micros, 0);
}

TEST(NodeGuardTest, NoticesAreCounted) {
  test::RecordingRunner runner;
  NodeGuard guard(NodeGuardConfig{}, runner, nullptr);
  cloud::CloudNotice n;
  n.provider = cloud::CloudProvider::gcp;
  n.stop = true;
  n.kind = "preempted";
  n.detail = "GCP preemption notice";
  EXPECT_EQ(guard.on_notice(n).kind, "preempted");
  EXPECT_EQ((guard.status().notices.at({"gcp", "preempted"})), 1u);
}

/// The gpumeter runs of a made-up node: PID 300 is run 7's job; asks are recorded, or refused.
struct FakeNodeRuns final : NodeRuns {
  std::vector<std::pair<std::int64_t, std::string>> asked;  // (meter pid, reason)
  bool refuse = false;
  std::optional<RunView> run_of(std::uint32_t pid) override {
    if (pid != 300) return std::nullopt;
    RunView v;
    v.run_id = 7;
    v.meter_pid = 299;
    v.job_pid = 300;
    v.socket = "/tmp/no-such-dir/progress.sock";
    return v;
  }
  Result<void> ask_stop(const RunView& run, const std::string& reason) override {
    if (refuse) return make_error(ErrorKind::unavailable, "the run's socket: gone");
    asked.emplace_back(run.meter_pid, reason);
    return ok_result();
  }
};

// --stop-idle-held: a warning first, then the holders of a GPU held idle are stopped; a gpumeter run through
// its own supervisor (asked, never signalled here), any other process with SIGTERM and SIGKILL after the
// grace; a process that also works on a busy GPU is left alone.
TEST(NodeGuardTest, GpusHeldIdleAreStoppedThroughTheRunsCheckpointNeverWithABareKill) {
  test::RecordingRunner runner;
  FakeNodeRuns runs;
  NodeGuardConfig cfg;
  cfg.stop_idle_held_ms = 100'000;
  cfg.grace_ms = 5'000;
  NodeGuard guard(cfg, runner, nullptr, &runs);
  auto input = [&](std::int64_t t_s, double util0) {
    NodeInput in;
    in.now_ns = t_s * kS;
    in.unix_ms = 20'000 * kDayMs + t_s * 1000;
    // GPU 0: the run's job (300) and a notebook kernel (400); GPU 1: busy with 500, which also holds GPU 0.
    in.gpus = {NodeGpu{util0, 3, {300, 400, 500}}, NodeGpu{95.0, 1, {500}}};
    in.gpu_processes = {{300, {}}, {400, {}}, {500, {}}, {500, {}}};
    return in;
  };
  EXPECT_TRUE(guard.step(input(0, 1.0)).empty());
  EXPECT_TRUE(guard.step(input(50, 2.0)).empty());
  // Busy again: the spell starts over.
  EXPECT_TRUE(guard.step(input(60, 40.0)).empty());
  EXPECT_TRUE(guard.step(input(61, 0.0)).empty());
  EXPECT_EQ(kinds(guard.step(input(152, 0.0))), (std::vector<std::string>{"idle_held_warning"}));
  EXPECT_TRUE(runner.sent.empty());
  const auto stopped = guard.step(input(161, 0.0));
  EXPECT_EQ(kinds(stopped), (std::vector<std::string>{"idle_held_stop", "idle_held_stop"}));
  ASSERT_EQ(runs.asked.size(), 1u);
  EXPECT_EQ(runs.asked[0].first, 299);
  EXPECT_NE(runs.asked[0].second.find("GPU 0 held idle"), std::string::npos) << runs.asked[0].second;
  EXPECT_NE(stopped[0].message.find("asked gpumeter run 7"), std::string::npos) << stopped[0].message;
  // The notebook kernel gets SIGTERM; the run's job is its supervisor's; 500 works on GPU 1.
  ASSERT_EQ(runner.sent.size(), 1u);
  EXPECT_EQ(runner.sent[0].pid, 400);
  EXPECT_EQ(runner.sent[0].sig, SIGTERM);
  // Nothing asked twice while the GPU stays held; SIGKILL only after the grace, to a process still there.
  EXPECT_TRUE(guard.step(input(165, 0.0)).empty());
  EXPECT_EQ(runs.asked.size(), 1u);
  EXPECT_EQ(kinds(guard.step(input(166, 0.0))), (std::vector<std::string>{"sigkill"}));
  ASSERT_EQ(runner.sent.size(), 2u);
  EXPECT_EQ(runner.sent[1].pid, 400);
  EXPECT_EQ(runner.sent[1].sig, SIGKILL);
  EXPECT_EQ(guard.status().events.at("idle_held_stop"), 2u);
}

TEST(NodeGuardTest, ARunThatCannotBeAskedGetsSigtermAndAnUnreadableGpuIsNeverHeldIdle) {
  test::RecordingRunner runner;
  FakeNodeRuns runs;
  runs.refuse = true;
  NodeGuardConfig cfg;
  cfg.stop_idle_held_ms = 10'000;
  NodeGuard guard(cfg, runner, nullptr, &runs);
  auto input = [&](std::int64_t t_s, std::optional<double> util) {
    NodeInput in;
    in.now_ns = t_s * kS;
    in.unix_ms = 20'000 * kDayMs + t_s * 1000;
    in.gpus = {NodeGpu{util, 1, {300}}};
    in.gpu_processes = {{300, {}}};
    return in;
  };
  // Utilization not readable: never idle, never stopped on doubt.
  EXPECT_TRUE(guard.step(input(0, std::nullopt)).empty());
  EXPECT_TRUE(guard.step(input(100, std::nullopt)).empty());
  EXPECT_TRUE(guard.step(input(101, 0.0)).empty());
  const auto events = guard.step(input(111, 0.0));
  // (The collections jumped past the warning's window: the stop comes without it.)
  EXPECT_EQ(kinds(events), (std::vector<std::string>{"idle_held_stop", "idle_held_stop"}));
  bool fell_back = false;
  for (const auto& e : events)
    fell_back = fell_back || e.message.find("could not be asked") != std::string::npos;
  EXPECT_TRUE(fell_back);
  ASSERT_EQ(runner.sent.size(), 1u);
  EXPECT_EQ(runner.sent[0].pid, 300);
  EXPECT_EQ(runner.sent[0].sig, SIGTERM);
}

}  // namespace
}  // namespace gm::agent
