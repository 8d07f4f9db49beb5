#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <thread>

#include "guard/guard.h"
#include "support/support.h"

namespace gm {
namespace {

TEST(GuardProgressTest, ParsesDatagrams) {
  auto u = guard::parse_progress_message(
      R"({"step": 120, "total_steps": 10000, "samples": 3840, "tokens": 491520, "metrics": {"loss": 2.31, "acc": 0.41}})");
  ASSERT_TRUE(u.ok()) << u.error().message;
  EXPECT_EQ(*u->step, 120);
  EXPECT_EQ(*u->total_steps, 10000);
  EXPECT_EQ(*u->samples, 3840);
  EXPECT_EQ(*u->tokens, 491520);
  EXPECT_DOUBLE_EQ(u->metrics.at("loss"), 2.31);
  auto empty = guard::parse_progress_message("{}");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
  EXPECT_TRUE(guard::parse_progress_message(R"({"step": 5.0})").ok());
  for (const char* bad : {"", "[1]", "{", R"({"step": -1})", R"({"step": "3"})", R"({"step": 1.5})",
                          R"({"metrics": {"loss": "x"}})", R"({"metrics": 3})"}) {
    EXPECT_FALSE(guard::parse_progress_message(bad).ok()) << bad;
  }
}

TEST(GuardProgressTest, FlopsPerTokenIsAPositiveNumberOfFlops) {
  auto u = guard::parse_progress_message(R"({"flops_per_token": 4.8e10})");
  ASSERT_TRUE(u.ok()) << u.error().message;
  EXPECT_DOUBLE_EQ(*u->flops_per_token, 4.8e10);
  EXPECT_FALSE(u->empty());  // a report of its own: the run's MFU basis
  for (const char* bad : {R"({"flops_per_token": 0})", R"({"flops_per_token": -3})",
                          R"({"flops_per_token": "1e9"})", R"({"flops_per_token": 1e30})"}) {
    auto r = guard::parse_progress_message(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.error().message.find("flops_per_token"), std::string::npos) << r.error().message;
  }
}

TEST(GuardProgressTest, RecognisesTqdmAndHfLogs) {
  auto a = guard::parse_output_line(" 45%|████▌     | 45/100 [00:01<00:02, 30.1it/s]");
  ASSERT_TRUE(a);
  EXPECT_EQ(*a->step, 45);
  EXPECT_EQ(*a->total_steps, 100);
  auto b = guard::parse_output_line(
      "Epoch 0:  45%|████▌     | 45/100 [00:01<00:02, 30.10it/s, loss=2.3, v_num=0]");
  ASSERT_TRUE(b);
  EXPECT_EQ(*b->step, 45);
  EXPECT_DOUBLE_EQ(b->metrics.at("loss"), 2.3);
  EXPECT_EQ(b->metrics.count("v_num"), 0u);
  auto c =
      guard::parse_output_line("{'loss': 2.31, 'grad_norm': 1.5, 'learning_rate': 5e-05, 'epoch': 0.12}");
  ASSERT_TRUE(c);
  EXPECT_FALSE(c->step);
  EXPECT_DOUBLE_EQ(c->metrics.at("learning_rate"), 5e-05);
  EXPECT_FALSE(guard::parse_output_line("copied 3/4 files"));
  EXPECT_FALSE(guard::parse_output_line("date 2024/10/01 [x]"));  // 10 is not followed by " ["... 2024/10 is
  EXPECT_FALSE(guard::parse_output_line("hello world"));
  EXPECT_FALSE(guard::parse_output_line("12/10 [bad]"));  // step beyond total

  guard::OutputProgressParser p;
  auto ups = p.feed("  1%|          | 1/100 [00:00<00:10]\r  2%|          | 2/1");
  ASSERT_EQ(ups.size(), 1u);
  EXPECT_EQ(*ups[0].step, 1);
  ups = p.feed("00 [00:00<00:10]\n");
  ASSERT_EQ(ups.size(), 1u);
  EXPECT_EQ(*ups[0].step, 2);
}

TEST(GuardForecastTest, NoProgressNoForecast) {
  meter::Forecaster f;
  EXPECT_FALSE(f.forecast(10, 5, 1));
  f.add(1, 1, std::nullopt);
  f.add(2, 2, std::nullopt);
  f.add(3, 3, std::nullopt);
  f.add(4, 4, std::nullopt);
  f.add(5, 5, std::nullopt);
  EXPECT_FALSE(f.forecast(5, 5, 1)) << "no total known";
}

TEST(GuardForecastTest, SteadyJobForecastIsExactAndSkipsWarmUp) {
  meter::Forecaster f;
  // 10 s of start-up before step 1, then 0.5 s per step, total 1000 steps
  f.add(0, 0, 1000);
  f.add(10, 1, 1000);
  for (int s = 2; s <= 100; ++s) f.add(10 + (s - 1) * 0.5, s, 1000);
  const double now = 10 + 99 * 0.5;
  auto fc = f.forecast(now, now * 2.0, 2.0);  // $2/s
  ASSERT_TRUE(fc);
  EXPECT_DOUBLE_EQ(fc->s_per_step, 0.5);
  EXPECT_DOUBLE_EQ(fc->remaining_s, 900 * 0.5);
  EXPECT_DOUBLE_EQ(fc->total_usd, (now + 450) * 2.0);
  // Steady steps: the interval is the minimum spread, ±5 % of the remaining 450 s at $2/s (wider than the
  // one report interval, 0.5 s, that the step shown may lag the real one).
  EXPECT_DOUBLE_EQ(fc->low_usd, fc->total_usd - 0.05 * 450 * 2.0);
  EXPECT_DOUBLE_EQ(fc->high_usd, fc->total_usd + 0.05 * 450 * 2.0);
}

TEST(GuardForecastTest, IntervalFromSpread) {
  meter::Forecaster f;
  f.add(0, 0, 1000);
  double t = 0;
  for (int s = 1; s <= 200; ++s) {
    t += (s % 2 == 0) ? 0.4 : 0.6;
    f.add(t, s, 1000);
  }
  auto fc = f.forecast(t, t, 1.0);
  ASSERT_TRUE(fc);
  EXPECT_LT(fc->low_usd, fc->total_usd + 1e-9);
  EXPECT_GT(fc->high_usd, fc->low_usd);
  // Issue 35 changed this expectation: the pace is the slope over the window, 0.5 s a step (the old
  // interval-median said 0.4, the faster of two equally frequent step times, and 80 s short of the truth).
  EXPECT_NEAR(fc->s_per_step, 0.5, 0.01);
  EXPECT_NEAR(fc->total_usd, t + 800 * 0.5, 1.0);
  EXPECT_LE(fc->low_usd, fc->total_usd - 0.05 * fc->remaining_s + 1e-9);   // at least 5 % below
  EXPECT_GE(fc->high_usd, fc->total_usd + 0.05 * fc->remaining_s - 1e-9);  // and above
}

TEST(GuardPolicyTest, WarnsOnceAndStopsAtBudget) {
  guard::GuardConfig cfg;
  cfg.budget_micros = 10 * util::kMicrosPerUsd;
  cfg.warn_at_pct = {50, 80};
  guard::BudgetGuard g(cfg);
  guard::GuardInput in;
  in.spent_micros = 4'999'999;
  EXPECT_TRUE(g.evaluate(in).empty());
  in.spent_micros = 8'000'000;
  auto d = g.evaluate(in);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].kind, store::ActionKind::warn);
  EXPECT_EQ(d[1].kind, store::ActionKind::warn);
  EXPECT_TRUE(g.evaluate(in).empty());
  in.spent_micros = 10'000'000;
  d = g.evaluate(in);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].kind, store::ActionKind::stop_budget);
  EXPECT_EQ(d[0].stopped_by, store::StopReason::budget);
  EXPECT_TRUE(g.evaluate(in).empty()) << "a stop is latched";
}

TEST(GuardPolicyTest, ForecastStopHonoursMinimums) {
  guard::GuardConfig cfg;
  cfg.budget_micros = 10 * util::kMicrosPerUsd;
  cfg.forecast_stop = true;
  guard::BudgetGuard g(cfg);
  guard::GuardInput in;
  in.spent_micros = 1'000'000;
  meter::Forecast fc;
  fc.total_usd = 100;
  fc.low_usd = 90;
  fc.high_usd = 110;
  in.forecast = fc;
  in.elapsed_ms = 4'000;
  in.forecast_intervals = 10;
  EXPECT_TRUE(g.evaluate(in).empty()) << "before the minimum run time";
  in.elapsed_ms = 6'000;
  in.forecast_intervals = 4;
  EXPECT_TRUE(g.evaluate(in).empty()) << "before the minimum progress";
  in.forecast_intervals = 5;
  in.forecast->low_usd = 9.5;
  EXPECT_TRUE(g.evaluate(in).empty()) << "lower bound under the budget";
  in.forecast->low_usd = 90;
  auto d = g.evaluate(in);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].stopped_by, store::StopReason::forecast);
}

TEST(GuardPolicyTest, IdleStop) {
  guard::GuardConfig cfg;
  cfg.max_idle_ms = 3000;
  guard::BudgetGuard g(cfg);
  guard::GuardInput in;
  in.idle_for_ms = 2999;
  EXPECT_TRUE(g.evaluate(in).empty());
  in.idle_for_ms = 3000;
  auto d = g.evaluate(in);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].stopped_by, store::StopReason::idle);
}

TEST(GuardPolicyTest, ParsesWarnAt) {
  auto w = guard::parse_warn_at("80%, 50%");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(*w, (std::vector<double>{50, 80}));
  EXPECT_FALSE(guard::parse_warn_at("150%").ok());
  EXPECT_FALSE(guard::parse_warn_at("0%").ok());
  EXPECT_FALSE(guard::parse_warn_at("50%,x").ok());
  EXPECT_NE(guard::parse_warn_at("150%").error().message.find("150%"), std::string::npos);
}

TEST(GuardNotifyTest, NotifyCommandGetsEnvironment) {
  test::TempDir dir;
  guard::GuardEvent e{7,
                      "stop_budget",
                      "budget reached",
                      3 * util::kMicrosPerUsd,
                      3 * util::kMicrosPerUsd,
                      std::nullopt,
                      "python t.py",
                      "box"};
  const std::string out = dir.path() + "/out";
  ASSERT_TRUE(
      guard::run_notify_command(
          "echo \"$GPUMETER_EVENT $GPUMETER_RUN_ID $GPUMETER_COST_USD [$GPUMETER_FORECAST_USD]\" > " + out, e)
          .ok());
  EXPECT_EQ(test::read_file(out), "stop_budget 7 3.000000 []\n");
  EXPECT_FALSE(guard::run_notify_command("exit 3", e).ok());
  EXPECT_FALSE(guard::run_notify_command("sleep 5", e, 100).ok());
}

TEST(GuardNotifyTest, WebhookPostsSlackCompatibleJson) {
  httplib::Server server;
  std::string body;
  server.Post("/hook", [&](const httplib::Request& req, httplib::Response& res) {
    body = req.body;
    res.set_content("ok", "text/plain");
  });
  const int port = server.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread t([&] { server.listen_after_bind(); });
  while (!server.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  guard::GuardEvent e{7,    "warn",        "spent $8", 8 * util::kMicrosPerUsd, 10 * util::kMicrosPerUsd,
                      12.5, "python t.py", "box"};
  auto r = guard::post_webhook("http://127.0.0.1:" + std::to_string(port) + "/hook", e);
  server.stop();
  t.join();
  ASSERT_TRUE(r.ok()) << r.error().message;
  auto j = nlohmann::json::parse(body);
  EXPECT_NE(j["text"].get<std::string>().find("spent $8"), std::string::npos);
  EXPECT_EQ(j["event"], "warn");
  EXPECT_DOUBLE_EQ(j["forecast_cost_usd"].get<double>(), 12.5);
  EXPECT_FALSE(guard::post_webhook("ftp://x", e).ok());
  EXPECT_FALSE(guard::post_webhook("http://127.0.0.1:1/hook", e, 500).ok());
}

}  // namespace
}  // namespace gm
