// The supervisor with an in-memory GPU backend and real child processes.
#include "guard/session.h"

#include <gtest/gtest.h>

#include "report/run_report.h"
#include "support/fakes.h"
#include "support/support.h"
#include "util/exit_codes.h"

namespace gm {
namespace {

guard::SessionConfig config(std::vector<std::string> argv) {
  auto c = test::dollar_per_second_session(std::move(argv));
  c.run.command = "test job";
  c.run.user = "u";
  c.run.host = "h";
  return c;
}

TEST(SessionTest, ExactBilledCostRecordedAndExitStatusPassedThrough) {
  test::TempDir dir;
  auto ledger = store::Ledger::open(dir.path() + "/l.db");
  ASSERT_TRUE(ledger.ok());
  auto backend = test::one_static_gpu(90);
  sys::PosixProcessRunner runner;
  test::RecordingSink sink;
  auto cfg = config({"sh", "-c", "sleep 1.2; exit 3"});
  auto out = guard::run_session(cfg, &backend, ledger->get(), nullptr, util::system_clock(), runner, sink);
  ASSERT_TRUE(out.ok()) << out.error().message;
  EXPECT_EQ(out->exit_code, 3);
  EXPECT_TRUE(out->recorded);
  const store::RunRecord& r = out->run;
  EXPECT_EQ(r.billed_s, (r.wall_ms + 999) / 1000);
  EXPECT_EQ(r.cost_micros, r.billed_s * 1'000'000);
  auto stored = (*ledger)->last_run();
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->status, store::RunStatus::failed);
  EXPECT_EQ(*stored->exit_code, 3);
  EXPECT_EQ(stored->cost_micros, r.cost_micros);
  EXPECT_EQ(stored->gpus_allocated, (std::vector<std::string>{"GPU-0"}));
  auto samples = (*ledger)->samples(stored->id);
  ASSERT_TRUE(samples.ok());
  EXPECT_GE(samples->size(), 2u);
  EXPECT_FALSE((*ledger)->rollups({})->empty());
}

TEST(SessionTest, BudgetStopSignalsTheGroupAndRecordsActions) {
  test::TempDir dir;
  auto ledger = store::Ledger::open(dir.path() + "/l.db");
  ASSERT_TRUE(ledger.ok());
  auto backend = test::one_static_gpu(90);
  sys::PosixProcessRunner runner;
  test::RecordingSink sink;
  auto cfg = config({"sh", "-c", "sleep 20 & wait"});
  cfg.stop_to = guard::StopTarget::group;
  cfg.guard.budget_micros = 1 * util::kMicrosPerUsd;
  cfg.grace_ms = 1000;
  auto out = guard::run_session(cfg, &backend, ledger->get(), nullptr, util::system_clock(), runner, sink);
  ASSERT_TRUE(out.ok()) << out.error().message;
  EXPECT_EQ(out->exit_code, util::kExitGuardStop);
  EXPECT_EQ(*out->run.stopped_by, "budget");
  EXPECT_LT(out->run.wall_ms, 4000);
  auto actions = (*ledger)->actions((*ledger)->last_run()->id);
  ASSERT_TRUE(actions.ok());
  std::vector<store::ActionKind> kinds;
  for (const auto& a : *actions) kinds.push_back(a.kind);
  EXPECT_NE(std::find(kinds.begin(), kinds.end(), store::ActionKind::stop_budget), kinds.end());
  EXPECT_NE(std::find(kinds.begin(), kinds.end(), store::ActionKind::sigterm), kinds.end());
  EXPECT_EQ((*ledger)->last_run()->status, store::RunStatus::stopped);
}

TEST(SessionTest, ProgressDatagramsAndMalformedOnes) {
  auto backend = test::one_static_gpu(90);
  sys::PosixProcessRunner runner;
  test::RecordingSink sink;
  auto cfg = config({"python3", "-c",
                     "import os, socket\n"
                     "s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\n"
                     "p = os.environ['GPUMETER_SOCKET']\n"
                     "s.sendto(b'{\"step\": 3, \"total_steps\": 9, \"tokens\": 3000}', p)\n"
                     "s.sendto(b'not json', p)\n"
                     "s.sendto(b'{\"step\": -2}', p)\n"
                     "import time; time.sleep(0.3)\n"});
  auto out = guard::run_session(cfg, &backend, nullptr, nullptr, util::system_clock(), runner, sink);
  ASSERT_TRUE(out.ok()) << out.error().message;
  EXPECT_EQ(out->exit_code, 0);
  EXPECT_FALSE(out->recorded);
  const report::RunReport report = report::session_report(*out, nullptr);
  EXPECT_EQ(*report.steps, 3);
  EXPECT_EQ(*report.total_steps, 9);
  EXPECT_EQ(*report.tokens, 3000);
  ASSERT_FALSE(out->warnings.empty());
  EXPECT_NE(out->warnings.back().find("2 malformed"), std::string::npos) << out->warnings.back();
}

TEST(SessionTest, IdleGpusStopTheJob) {
  auto backend = test::one_static_gpu(0);
  sys::PosixProcessRunner runner;
  test::RecordingSink sink;
  auto cfg = config({"sleep", "20"});
  cfg.guard.max_idle_ms = 2000;
  cfg.grace_ms = 1000;
  auto out = guard::run_session(cfg, &backend, nullptr, nullptr, util::system_clock(), runner, sink);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->exit_code, util::kExitGuardStop);
  EXPECT_EQ(*out->run.stopped_by, "idle");
  EXPECT_LT(out->run.wall_ms, 4000);
}

TEST(SessionTest, UnrunnableProgramIsAnError) {
  auto backend = test::one_static_gpu(0);
  sys::PosixProcessRunner runner;
  test::RecordingSink sink;
  auto out = guard::run_session(config({"/no/such/program"}), &backend, nullptr, nullptr,
                                util::system_clock(), runner, sink);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->exit_code, 127);
  ASSERT_TRUE(out->start_error);
  test::TempDir dir;
  const std::string script = dir.path() + "/not-executable.sh";
  FILE* f = std::fopen(script.c_str(), "w");
  std::fputs("#!/bin/sh\necho hi\n", f);
  std::fclose(f);
  out = guard::run_session(config({script}), &backend, nullptr, nullptr, util::system_clock(), runner, sink);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->exit_code, 126) << "found but not executable: 126 by convention";
}

}  // namespace
}  // namespace gm
