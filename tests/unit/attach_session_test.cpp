// The supervisor of `gpumeter attach` (a process gpumeter did not start) on a fake clock and a fake runner:
// a stop that is only the signal, a budget raised by a control datagram, notebook cells, a session counted
// from the process's start, the idle_gpus_held watch and the control-datagram parser (issue 27).
#include <gtest/gtest.h>
#include <signal.h>

#include "guard/supervisor.h"
#include "report/run_report.h"
#include "support/fakes.h"
#include "util/exit_codes.h"

namespace gm {
namespace {

constexpr pid_t kPid = 5151;

using test::run_until;

guard::SessionConfig attach_config() {
  guard::SessionConfig c;
  c.price = test::flag_price(3600);  // $1 per GPU-second
  c.allocated = {0};
  c.attached = true;
  c.control_datagrams = true;
  c.kill_after_grace = false;
  c.stop_signal = SIGINT;
  c.run.command = "python3 -m ipykernel_launcher";
  return c;
}

TEST(AttachSessionTest, TheBudgetStopIsOneSigintAndARaisedBudgetIsEvaluatedAfresh) {
  util::FakeClock clock;
  test::RecordingRunner runner;
  test::RecordingSink sink;
  auto backend = test::one_static_gpu(90);
  auto cfg = attach_config();
  cfg.guard.budget_micros = 5 * util::kMicrosPerUsd;
  guard::Supervisor s(cfg, &backend, nullptr, nullptr, clock, runner, sink);
  s.begin();
  s.started(kPid);
  run_until(s, clock, 30.0);
  ASSERT_EQ(runner.sent.size(), 1u) << "never a SIGKILL after the stop signal (--grace never)";
  EXPECT_EQ(runner.sent[0].sig, SIGINT);
  EXPECT_EQ(runner.sent[0].pid, kPid);
  s.on_datagram(R"({"control": {"budget_usd": 40}})");
  run_until(s, clock, 39.5);
  EXPECT_EQ(runner.sent.size(), 1u);
  run_until(s, clock, 40.0);
  ASSERT_EQ(runner.sent.size(), 2u) << "the new budget stops again";
  ASSERT_TRUE(sink.last);
  EXPECT_EQ(sink.last->budget_micros, 40 * util::kMicrosPerUsd);
  s.on_detach();
  auto out = s.finish();
  EXPECT_EQ(out.exit_code, util::kExitGuardStop);
  EXPECT_EQ(out.run.status, store::RunStatus::stopped);
  EXPECT_FALSE(out.run.exit_code) << "no exit status for a process gpumeter did not start";
  EXPECT_EQ(out.run.budget_micros, 40 * util::kMicrosPerUsd);
}

TEST(AttachSessionTest, ACellCostsTheSpendBetweenItsStartAndEnd) {
  util::FakeClock clock;
  test::RecordingRunner runner;
  test::RecordingSink sink;
  auto backend = test::one_static_gpu(80);
  guard::Supervisor s(attach_config(), &backend, nullptr, nullptr, clock, runner, sink);
  s.begin();
  s.started(kPid);
  run_until(s, clock, 1.5);
  s.on_datagram(R"j({"cell": {"id": 7, "event": "start", "source": "model.fit(x)"}})j");
  run_until(s, clock, 4.0);
  s.on_datagram(R"({"cell": {"id": 7, "event": "end", "status": "interrupted"}})");
  s.on_datagram(R"j({"cell": {"id": 8, "event": "end", "status": "refused", "source": "print(1)"}})j");
  s.on_datagram(R"({"cell": {"id": 9, "event": "start"}})");
  ASSERT_EQ(sink.cells.size(), 2u);
  EXPECT_EQ(sink.cells[0].cell_id, 7);
  EXPECT_EQ(sink.cells[0].cost_micros, 2'500'000) << "2.5 s at $1/s";
  EXPECT_EQ(sink.cells[0].start_ms, 1500);
  EXPECT_EQ(sink.cells[0].end_ms, 4000);
  EXPECT_EQ(sink.cells[0].status, store::CellStatus::interrupted);
  EXPECT_EQ(sink.cells[0].source, "model.fit(x)");
  ASSERT_TRUE(sink.cells[0].utilization_pct);
  EXPECT_DOUBLE_EQ(*sink.cells[0].utilization_pct, 80.0);
  EXPECT_EQ(sink.cells[1].status, store::CellStatus::refused);
  EXPECT_EQ(sink.cells[1].cost_micros, 0);
  run_until(s, clock, 6.0);
  s.on_exit(0);
  auto out = s.finish();
  EXPECT_EQ(out.exit_code, util::kExitOk);
  EXPECT_EQ(out.run.status, store::RunStatus::finished);
  ASSERT_EQ(out.cells.size(), 3u) << "a cell still open at the end is recorded unfinished";
  EXPECT_EQ(out.cells[2].status, store::CellStatus::unfinished);
  EXPECT_EQ(out.run.cost_micros, 6'000'000);
}

TEST(AttachSessionTest, TheSessionCountsFromTheProcessStart) {
  util::FakeClock clock;
  test::RecordingRunner runner;
  test::RecordingSink sink;
  auto backend = test::one_static_gpu(90);
  auto cfg = attach_config();
  cfg.started_ago_ms = 10'000;
  const std::int64_t unix_before = clock.unix_ms();
  guard::Supervisor s(cfg, &backend, nullptr, nullptr, clock, runner, sink);
  s.begin();
  s.started(kPid);
  run_until(s, clock, 2.0);
  ASSERT_TRUE(sink.last);
  EXPECT_EQ(*sink.last->spent_micros, 12 * util::kMicrosPerUsd)
      << "10 s before attaching + 2 s metered, at $1/s";
  EXPECT_DOUBLE_EQ(sink.last->elapsed_s, 12.0);
  s.on_detach();
  auto out = s.finish();
  EXPECT_EQ(out.run.status, store::RunStatus::detached);
  EXPECT_EQ(out.exit_code, util::kExitOk);
  EXPECT_EQ(out.run.start_unix_ms, unix_before - 10'000);
  EXPECT_EQ(out.run.cost_micros, 12'000'000);
}

TEST(AttachSessionTest, IdleGpusHeldIsRecordedOnceWhileTheProcessHoldsMemoryAndNeverStops) {
  util::FakeClock clock;
  test::RecordingRunner runner;
  test::RecordingSink sink;
  auto backend = test::one_static_gpu(1);
  gpu::ProcessSample p;
  p.pid = kPid;
  p.memory_bytes = 8ull << 30;
  backend.samples[0].processes.push_back(p);
  auto cfg = attach_config();
  cfg.idle_held_ms = 5'000;
  guard::Supervisor s(cfg, &backend, nullptr, nullptr, clock, runner, sink);
  s.begin();
  s.started(kPid);
  run_until(s, clock, 4.0);
  EXPECT_FALSE(sink.last->idle_held_s);
  run_until(s, clock, 12.0);
  ASSERT_TRUE(sink.last->idle_held_s);
  EXPECT_GE(*sink.last->idle_held_s, 5.0);
  EXPECT_DOUBLE_EQ(*sink.last->idle_held_usd_per_h, 3600.0);
  int recorded = 0;
  for (const auto& a : sink.actions) recorded += a.kind == store::ActionKind::idle_gpus_held;
  EXPECT_EQ(recorded, 1);
  EXPECT_TRUE(runner.sent.empty()) << "attach takes no action on idle";
  s.on_exit(0);
  auto out = s.finish();
  bool finding = false;
  for (const auto& f : report::session_report(out, nullptr).findings)
    finding = finding || f.kind == "idle_gpus_held";
  EXPECT_TRUE(finding);
}

TEST(AttachSessionTest, ControlDatagramsParse) {
  EXPECT_FALSE(guard::parse_session_control(R"({"step": 3, "total_steps": 10})"))
      << "progress is not control";
  EXPECT_FALSE(guard::parse_session_control("not json"));
  auto c = guard::parse_session_control(R"({"cell": {"id": 3, "event": "end"}})");
  ASSERT_TRUE(c && *c);
  EXPECT_EQ((*c)->cell->status, store::CellStatus::ok) << "an end without a status is ok";
  c = guard::parse_session_control(R"({"control": {"budget_usd": 2.5, "warn_at": "50%,90%"}})");
  ASSERT_TRUE(c && *c);
  EXPECT_EQ(*(*c)->budget_micros, 2'500'000);
  EXPECT_EQ((*c)->warn_at_pct->size(), 2u);
  for (const char* bad :
       {R"({"cell": {"id": -1, "event": "start"}})", R"({"cell": {"id": 1, "event": "go"}})",
        R"({"cell": {"id": 1, "event": "end", "status": "fine"}})", R"({"control": {"budget_usd": 0}})",
        R"({"control": {"warn_at": "150%"}})", R"({"control": 3})"}) {
    auto r = guard::parse_session_control(bad);
    ASSERT_TRUE(r) << bad;
    EXPECT_FALSE(*r) << bad;
  }
  c = guard::parse_session_control(R"({"cell": {"id": 1, "event": "start", "source": ")" +
                                   std::string(500, 'x') + "\"}}");
  ASSERT_TRUE(c && *c);
  EXPECT_EQ((*c)->cell->source.size(), 200u);
}

}  // namespace
}  // namespace gm
