// The supervisor state machine on a fake clock and a fake process runner: budget, forecast and idle stops,
// grace and SIGKILL, signal forwarding, status cadence and run statuses, in milliseconds of test time.
#include "guard/supervisor.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include "support/fakes.h"
#include "util/exit_codes.h"
#include "util/units.h"

namespace gm {
namespace {

using test::RecordingRunner;
using test::RecordingSink;
using test::run_until;

/// A run of "train" at $1 per GPU-second.
guard::SessionConfig config() {
  return test::dollar_per_second_session({"train"});
}

constexpr pid_t kPid = 4242;
constexpr std::int64_t kSecond = 1'000'000'000;

TEST(SupervisorTest, BudgetStopSignalsTheMainProcessThenKillsTheGroupAfterGrace) {
  util::FakeClock clock;
  RecordingRunner runner;
  RecordingSink sink;
  auto backend = test::one_static_gpu(90);
  auto cfg = config();
  cfg.guard.budget_micros = 5 * util::kMicrosPerUsd;
  cfg.guard.warn_at_pct = {50};
  cfg.grace_ms = 3000;
  guard::Supervisor s(cfg, &backend, nullptr, nullptr, clock, runner, sink);
  s.begin();
  s.started(kPid);
  run_until(s, clock, 4.5);
  ASSERT_TRUE(runner.sent.empty());
  ASSERT_EQ(sink.messages.size(), 1u);
  EXPECT_NE(sink.messages[0].find("[warn] spent $3.00"), std::string::npos) << sink.messages[0];
  run_until(s, clock, 5.0);
  ASSERT_EQ(runner.sent.size(), 1u);
  EXPECT_EQ(runner.sent[0].pid, kPid);
  EXPECT_EQ(runner.sent[0].sig, SIGTERM);
  EXPECT_FALSE(runner.sent[0].group) << "DataLoader workers must live while the main process checkpoints";
  run_until(s, clock, 7.9);
  EXPECT_EQ(runner.sent.size(), 1u) << "no SIGKILL inside the grace period";
  run_until(s, clock, 8.0);
  ASSERT_EQ(runner.sent.size(), 2u);
  EXPECT_EQ(runner.sent[1].sig, SIGKILL);
  EXPECT_TRUE(runner.sent[1].group);
  s.on_exit(W_EXITCODE(0, SIGKILL));
  auto out = s.finish();
  EXPECT_EQ(out.exit_code, util::kExitGuardStop);
  EXPECT_EQ(out.run.status, store::RunStatus::stopped);
  EXPECT_EQ(*out.run.stopped_by, "budget");
  // The stop's message quotes exactly what the ledger records for it.
  ASSERT_GE(out.actions.size(), 2u);
  for (const auto& a : out.actions)
    if (a.kind == store::ActionKind::stop_budget) {
      EXPECT_NE(a.message.find(util::format_usd(util::micros_to_usd(a.cost_micros))), std::string::npos)
          << a.message;
    }
  EXPECT_EQ(out.run.cost_micros, 8'000'000) << "8 billed seconds at $1/s";
}

TEST(SupervisorTest, StopToGroupAndExitWithinGraceNeedsNoKill) {
  util::FakeClock clock;
  RecordingRunner runner;
  RecordingSink sink;
  auto backend = test::one_static_gpu(90);
  auto cfg = config();
  cfg.guard.budget_micros = 2 * util::kMicrosPerUsd;
  cfg.stop_to = guard::StopTarget::group;
  cfg.stop_signal = SIGUSR1;
  cfg.grace_ms = 10'000;
  guard::Supervisor s(cfg, &backend, nullptr, nullptr, clock, runner, sink);
  s.begin();
  s.started(kPid);
  run_until(s, clock, 2.0);
  ASSERT_EQ(runner.sent.size(), 1u);
  EXPECT_EQ(runner.sent[0].sig, SIGUSR1);
  EXPECT_TRUE(runner.sent[0].group);
  run_until(s, clock, 4.0);
  s.on_exit(W_EXITCODE(0, 0));
  run_until(s, clock, 20.0);
  EXPECT_EQ(runner.sent.size(), 1u);
  EXPECT_EQ(s.finish().exit_code, util::kExitGuardStop);
}

TEST(SupervisorTest, ForecastStopFromNestedTqdmBars) {
  util::FakeClock clock;
  RecordingRunner runner;
  RecordingSink sink;
  auto backend = test::one_static_gpu(90);
  auto cfg = config();
  cfg.guard.budget_micros = 100 * util::kMicrosPerUsd;  // the job needs 3 × 100 steps × 0.5 s = 150 s = $150
  cfg.guard.forecast_stop = true;
  guard::Supervisor s(cfg, &backend, nullptr, nullptr, clock, runner, sink);
  s.begin();
  s.started(kPid);
  s.on_output(guard::JobStream::err, "epoch:   0%|          | 0/3 [00:00<?, ?it/s]\n");
  for (int step = 0; step <= 60 && runner.sent.empty(); ++step) {
    s.on_output(guard::JobStream::err,
                fmt::format("\r  {}%|          | {}/100 [00:01<00:02, 2.0it/s]\x1b[A", step, step));
    run_until(s, clock, (step + 1) * 0.5);
  }
  ASSERT_EQ(runner.sent.size(), 1u);
  const auto snap = s.snapshot();
  ASSERT_TRUE(snap.forecast);
  EXPECT_EQ(snap.total_steps, 300) << "epochs × steps";
  EXPECT_NEAR(snap.forecast->total_usd, 150.0, 15.0);
  s.on_exit(W_EXITCODE(0, SIGTERM));
  auto out = s.finish();
  EXPECT_EQ(*out.run.stopped_by, "forecast");
}

TEST(SupervisorTest, IdleGpusStopTheJob) {
  util::FakeClock clock;
  RecordingRunner runner;
  RecordingSink sink;
  auto backend = test::one_static_gpu(0);
  auto cfg = config();
  cfg.guard.max_idle_ms = 3000;
  guard::Supervisor s(cfg, &backend, nullptr, nullptr, clock, runner, sink);
  s.begin();
  s.started(kPid);
  run_until(s, clock, 2.5);
  EXPECT_TRUE(runner.sent.empty());
  run_until(s, clock, 3.0);
  ASSERT_EQ(runner.sent.size(), 1u) << "idle from the start for --max-idle 3s";
  s.on_exit(W_EXITCODE(0, SIGTERM));
  EXPECT_EQ(*s.finish().run.stopped_by, "idle");
}

TEST(SupervisorTest, ForwardedSignalsAndRunStatuses) {
  struct Case {
    int wait_status;
    store::RunStatus status;
  };
  for (const Case& c :
       {Case{W_EXITCODE(0, 0), store::RunStatus::succeeded}, Case{W_EXITCODE(1, 0), store::RunStatus::failed},
        Case{W_EXITCODE(0, SIGINT), store::RunStatus::interrupted},
        Case{W_EXITCODE(130, 0), store::RunStatus::interrupted}}) {
    util::FakeClock clock;
    RecordingRunner runner;
    RecordingSink sink;
    auto backend = test::one_static_gpu(90);
    guard::Supervisor s(config(), &backend, nullptr, nullptr, clock, runner, sink);
    s.begin();
    s.started(kPid);
    run_until(s, clock, 2.0);
    s.on_signal(SIGINT);
    ASSERT_EQ(runner.sent.size(), 1u);
    EXPECT_EQ(runner.sent[0].sig, SIGINT);
    EXPECT_FALSE(runner.sent[0].group);
    s.on_exit(c.wait_status);
    auto out = s.finish();
    EXPECT_EQ(out.run.status, c.status);
    EXPECT_FALSE(out.run.stopped_by);
    EXPECT_EQ(out.exit_code, sys::exit_code_of_wait_status(c.wait_status));
  }
}

TEST(SupervisorTest, StatusEveryKeepsItsCadence) {
  util::FakeClock clock;
  RecordingRunner runner;
  RecordingSink sink;
  auto backend = test::one_static_gpu(90);
  auto cfg = config();
  cfg.status_every_ms = 5000;
  guard::Supervisor s(cfg, &backend, nullptr, nullptr, clock, runner, sink);
  s.begin();
  s.started(kPid);
  // Ticks arrive late by a varying amount, as on a loaded machine.
  for (int i = 1; i <= 20; ++i) {
    clock.advance_ns(kSecond + (i % 3) * 90'000'000);
    s.on_time();
  }
  ASSERT_GE(sink.periodic_at_s.size(), 3u);
  for (std::size_t i = 0; i < sink.periodic_at_s.size(); ++i)
    EXPECT_NEAR(sink.periodic_at_s[i], 5.0 * static_cast<double>(i + 1), 1.2) << i;
}

TEST(SupervisorTest, WithoutGpuTelemetryWallTimeTimesPrice) {
  util::FakeClock clock;
  RecordingRunner runner;
  RecordingSink sink;
  auto cfg = config();
  cfg.telemetry = false;
  cfg.allocated = {};
  guard::Supervisor s(cfg, nullptr, nullptr, nullptr, clock, runner, sink);
  s.begin();
  s.started(kPid);
  ASSERT_EQ(sink.warnings.size(), 1u);
  EXPECT_NE(sink.warnings[0].find("no GPU telemetry"), std::string::npos);
  run_until(s, clock, 3.2);
  EXPECT_EQ(*s.snapshot().spent_micros, 3'200'000);
  s.on_exit(W_EXITCODE(0, 0));
  auto out = s.finish();
  EXPECT_EQ(out.run.billed_s, 4);
  EXPECT_EQ(out.run.cost_micros, 4'000'000);
  EXPECT_TRUE(out.run.gpus_allocated.empty());

  auto no_price = config();
  no_price.telemetry = false;
  no_price.allocated = {};
  no_price.price.reset();
  RecordingSink sink2;
  guard::Supervisor t(no_price, nullptr, nullptr, nullptr, clock, runner, sink2);
  t.begin();
  t.started(kPid);
  run_until(t, clock, 6.0);
  EXPECT_FALSE(t.snapshot().spent_micros);
  t.on_exit(W_EXITCODE(0, 0));
  auto out2 = t.finish();
  EXPECT_EQ(out2.run.price_source, "none");
  EXPECT_GT(out2.run.wall_ms, 2000);
}

// A stop asked from outside the run (gpumeter mcp's stop_run, the node agent's idle stop) arrives as a
// control datagram and is the budget stop's sequence, performed by the run's own supervisor: the stop signal
// to the main process, the grace for the checkpoint, SIGKILL; recorded with who asked and why.
TEST(SupervisorTest, AStopRequestDatagramStopsTheJobLikeABudgetStopWithItsReason) {
  util::FakeClock clock;
  RecordingRunner runner;
  RecordingSink sink;
  auto backend = test::one_static_gpu(90);
  auto cfg = config();
  cfg.grace_ms = 3000;
  cfg.control_datagrams = true;
  guard::Supervisor s(cfg, &backend, nullptr, nullptr, clock, runner, sink);
  s.begin();
  // Before the job has started there is nothing to stop (and never a signal to PID -1).
  s.on_datagram(guard::stop_request_datagram({store::StopReason::mcp, "too early"}));
  EXPECT_TRUE(runner.sent.empty());
  s.started(kPid);
  run_until(s, clock, 2.0);
  // The budget changes through the same door, exactly.
  s.on_datagram(guard::budget_datagram(12'345'678, "mcp"));
  EXPECT_EQ(s.snapshot().budget_micros, std::optional<MicroUsd>(12'345'678));
  s.on_datagram(guard::stop_request_datagram({store::StopReason::mcp, "a better learning rate was found"}));
  ASSERT_EQ(runner.sent.size(), 1u);
  EXPECT_EQ(runner.sent[0].pid, kPid);
  EXPECT_EQ(runner.sent[0].sig, SIGTERM);
  EXPECT_FALSE(runner.sent[0].group);
  EXPECT_TRUE(s.snapshot().stopping);
  // A second request while stopping is a note, not a second signal.
  s.on_datagram(guard::stop_request_datagram({store::StopReason::idle, "again"}));
  EXPECT_EQ(runner.sent.size(), 1u);
  run_until(s, clock, 5.0);
  ASSERT_EQ(runner.sent.size(), 2u);
  EXPECT_EQ(runner.sent[1].sig, SIGKILL);
  s.on_exit(W_EXITCODE(0, SIGKILL));
  auto out = s.finish();
  EXPECT_EQ(out.exit_code, util::kExitGuardStop);
  EXPECT_EQ(out.run.status, store::RunStatus::stopped);
  EXPECT_EQ(out.run.stopped_by, std::optional<std::string>("mcp"));
  bool requested = false, budget = false, noted = false;
  for (const auto& a : out.actions) {
    if (a.kind == store::ActionKind::stop_requested &&
        a.message.find("a better learning rate") != std::string::npos)
      requested = a.message.find("gpumeter mcp") != std::string::npos;
    if (a.kind == store::ActionKind::stop_requested &&
        a.message.find("already stopping") != std::string::npos)
      noted = true;
    if (a.kind == store::ActionKind::budget && a.message.find("by mcp") != std::string::npos) budget = true;
  }
  EXPECT_TRUE(requested);
  EXPECT_TRUE(noted);
  EXPECT_TRUE(budget);
}

// The node agent's stop of a GPU held idle is recorded as an idle stop of the run.
TEST(SupervisorTest, TheNodeAgentsIdleStopIsAnIdleStop) {
  util::FakeClock clock;
  RecordingRunner runner;
  RecordingSink sink;
  auto backend = test::one_static_gpu(90);
  auto cfg = config();
  cfg.control_datagrams = true;
  guard::Supervisor s(cfg, &backend, nullptr, nullptr, clock, runner, sink);
  s.begin();
  s.started(kPid);
  run_until(s, clock, 1.0);
  s.on_datagram(guard::stop_request_datagram({store::StopReason::idle, "GPU 0 held idle for 2h"}));
  ASSERT_EQ(runner.sent.size(), 1u);
  s.on_exit(W_EXITCODE(0, 0));
  auto out = s.finish();
  EXPECT_EQ(out.run.stopped_by, std::optional<std::string>("idle"));
  bool idle = false;
  for (const auto& a : out.actions)
    idle = idle ||
           (a.kind == store::ActionKind::stop_idle && a.message.find("node agent") != std::string::npos &&
            a.message.find("held idle for 2h") != std::string::npos);
  EXPECT_TRUE(idle);
}

}  // namespace
}  // namespace gm
