// The supervisor on a preemption notice (stop signal at once, SIGKILL after the grace or before the
// deadline, status preempted) and on checkpoints (last_checkpoint_s, lost_work_usd, no_recent_checkpoint),
// on a fake clock and a fake process runner.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "guard/supervisor.h"
#include "report/run_report.h"
#include "support/fakes.h"
#include "util/exit_codes.h"

namespace gm {
namespace {

using test::run_until;

/// A run of "train" at $1 per GPU-second.
guard::SessionConfig config() {
  return test::dollar_per_second_session({"train"});
}

constexpr pid_t kPid = 4242;

cloud::CloudNotice aws_notice(std::int64_t deadline_unix_ms) {
  cloud::CloudNotice n;
  n.provider = cloud::CloudProvider::aws;
  n.stop = true;
  n.kind = "terminate";
  n.id = "x";
  n.deadline_unix_ms = deadline_unix_ms;
  n.detail = "AWS spot interruption notice: terminate";
  return n;
}

TEST(SupervisorPreemptionTest, NoticeSignalsAtOnceKillsAfterGraceAndEndsPreempted) {
  util::FakeClock clock;
  test::RecordingRunner runner;
  test::RecordingSink sink;
  auto backend = test::one_static_gpu(90);
  auto cfg = config();
  cfg.grace_ms = 10'000;
  guard::Supervisor s(cfg, &backend, nullptr, nullptr, clock, runner, sink);
  s.begin();
  s.started(kPid);
  run_until(s, clock, 3.5);
  s.on_datagram(R"({"checkpoint": "ckpt/a.pt"})");
  run_until(s, clock, 6.25);
  ASSERT_TRUE(runner.sent.empty());
  s.on_notice(aws_notice(clock.unix_ms() + 120'000));
  ASSERT_EQ(runner.sent.size(), 1u) << "the stop signal goes at once, not at the next tick";
  EXPECT_EQ(runner.sent[0].sig, SIGTERM);
  EXPECT_FALSE(runner.sent[0].group);
  s.on_notice(aws_notice(clock.unix_ms() + 120'000));
  EXPECT_EQ(runner.sent.size(), 1u) << "one notice, one stop";
  run_until(s, clock, 16.0);
  ASSERT_EQ(runner.sent.size(), 1u);
  run_until(s, clock, 16.3);
  ASSERT_EQ(runner.sent.size(), 2u) << "the grace (10 s) comes before the deadline (120 s)";
  EXPECT_EQ(runner.sent[1].sig, SIGKILL);
  s.on_exit(W_EXITCODE(0, SIGKILL));
  auto out = s.finish();
  EXPECT_EQ(out.exit_code, util::kExitPreempted);
  const store::RunRecord& run = out.run;
  EXPECT_EQ(run.status, store::RunStatus::preempted);
  EXPECT_EQ(*run.stopped_by, "preemption");
  EXPECT_EQ(*run.preemption_provider, "aws");
  ASSERT_TRUE(run.preemption_notice_unix_ms && run.preemption_deadline_unix_ms);
  EXPECT_EQ(*run.preemption_deadline_unix_ms - *run.preemption_notice_unix_ms, 120'000);
  ASSERT_TRUE(run.last_checkpoint_ms);
  EXPECT_EQ(*run.last_checkpoint_ms, 3500);
  ASSERT_TRUE(run.lost_work_micros);
  // $1 per second from the checkpoint at 3.5 s to the exit at 16.3 s (metered, before billing rounds up).
  EXPECT_NEAR(static_cast<double>(*run.lost_work_micros), 12'800'000.0, 1'000'000.0);
  EXPECT_NE(report::describe_status(run).find("preempted (aws notice at"), std::string::npos)
      << report::describe_status(run);
  const std::string json = report::render_run_report_json(report::session_report(out, nullptr));
  EXPECT_NE(json.find("\"preemption\": {"), std::string::npos);
  EXPECT_NE(json.find("\"lost_work_usd\""), std::string::npos);
  bool notified = false;
  for (const auto& m : sink.messages) notified = notified || m.rfind("[preempted]", 0) == 0;
  EXPECT_TRUE(notified);
}

TEST(SupervisorPreemptionTest, ShortDeadlineKillsBeforeItNotAfterTheGrace) {
  util::FakeClock clock;
  test::RecordingRunner runner;
  test::RecordingSink sink;
  auto backend = test::one_static_gpu(90);
  auto cfg = config();
  cfg.grace_ms = 60'000;
  guard::Supervisor s(cfg, &backend, nullptr, nullptr, clock, runner, sink);
  s.begin();
  s.started(kPid);
  run_until(s, clock, 2.0);
  s.on_notice(aws_notice(clock.unix_ms() + 30'000));  // GCP-like: 30 s
  run_until(s, clock, 2.0 + 30.0 - 5.0 - 0.1);
  EXPECT_EQ(runner.sent.size(), 1u);
  run_until(s, clock, 2.0 + 30.0 - 5.0 + 0.01);
  ASSERT_EQ(runner.sent.size(), 2u) << "SIGKILL 5 s before the provider's deadline";
  EXPECT_EQ(runner.sent[1].sig, SIGKILL);
}

TEST(SupervisorPreemptionTest, WarningsAreRecordedOnceAndDoNotStop) {
  util::FakeClock clock;
  test::RecordingRunner runner;
  test::RecordingSink sink;
  auto backend = test::one_static_gpu(90);
  guard::Supervisor s(config(), &backend, nullptr, nullptr, clock, runner, sink);
  s.begin();
  s.started(kPid);
  cloud::CloudNotice w;
  w.provider = cloud::CloudProvider::aws;
  w.kind = "rebalance";
  w.id = "rebalance t";
  w.detail = "AWS rebalance recommendation";
  s.on_notice(w);
  s.on_notice(w);
  run_until(s, clock, 2.0);
  EXPECT_TRUE(runner.sent.empty());
  s.on_exit(W_EXITCODE(0, 0));
  auto out = s.finish();
  EXPECT_EQ(out.run.status, store::RunStatus::succeeded);
  EXPECT_FALSE(out.run.lost_work_micros) << "a run that succeeded lost nothing";
  int warnings = 0;
  for (const auto& a : out.actions) warnings += a.kind == store::ActionKind::preemption_warning;
  EXPECT_EQ(warnings, 1);
}

TEST(SupervisorPreemptionTest, NoRecentCheckpointWarnsOncePerGapAndBecomesAFinding) {
  util::FakeClock clock;
  test::RecordingRunner runner;
  test::RecordingSink sink;
  auto backend = test::one_static_gpu(90);
  auto cfg = config();
  cfg.checkpoint_interval_ms = 5'000;
  guard::Supervisor s(cfg, &backend, nullptr, nullptr, clock, runner, sink);
  s.begin();
  s.started(kPid);
  run_until(s, clock, 12.0);
  s.on_exit(W_EXITCODE(1, 0));
  auto out = s.finish();
  int warned = 0;
  for (const auto& a : out.actions) warned += a.kind == store::ActionKind::no_recent_checkpoint;
  EXPECT_EQ(warned, 1);
  EXPECT_EQ(out.run.status, store::RunStatus::failed);
  ASSERT_TRUE(out.run.lost_work_micros);
  EXPECT_FALSE(out.run.last_checkpoint_ms);
  bool found = false;
  for (const auto& f : report::session_report(out, nullptr).findings)
    found = found || f.kind == "no_recent_checkpoint";
  EXPECT_TRUE(found);
}

TEST(SupervisorPreemptionTest, CheckpointGlobSeesNewFilesNotOldOnes) {
  const auto dir = std::filesystem::temp_directory_path() / ("gm_ckpt_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "old.pt") << "x";
  std::filesystem::last_write_time(dir / "old.pt",
                                   std::filesystem::file_time_type::clock::now() - std::chrono::hours(1));
  util::SystemClock clock;  // file times are wall-clock times
  test::RecordingRunner runner;
  test::RecordingSink sink;
  auto backend = test::one_static_gpu(90);
  auto cfg = config();
  cfg.sample_interval_ms = 20;
  cfg.checkpoint_glob = "*.pt";
  cfg.checkpoint_dir = dir.string();
  guard::Supervisor s(cfg, &backend, nullptr, nullptr, clock, runner, sink);
  s.begin();
  s.started(kPid);
  auto tick_for = [&](int ms) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (std::chrono::steady_clock::now() < end) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      s.on_time();
    }
  };
  tick_for(100);
  EXPECT_FALSE(s.done());
  std::ofstream(dir / "new.pt") << "y";
  tick_for(100);
  s.on_exit(W_EXITCODE(0, SIGKILL));
  auto out = s.finish();
  int checkpoints = 0;
  for (const auto& a : out.actions) checkpoints += a.kind == store::ActionKind::checkpoint;
  EXPECT_EQ(checkpoints, 1) << "the old file sets the baseline, the new one is a checkpoint";
  EXPECT_TRUE(out.run.last_checkpoint_ms);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gm
