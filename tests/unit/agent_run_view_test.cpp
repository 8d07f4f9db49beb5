// The agent's view of runs (docs/agent.md "Runs"): the runs' published views, read back with their freshness
// and their meter's liveness, and the gpumeter_run_* series rendered from them.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "agent/exposition.h"
#include "agent/run_view.h"
#include "support/support.h"

namespace gm::agent {
namespace {

constexpr std::int64_t kNow = 1'790'000'000'000;

RunView on_track_run() {
  RunView v;
  v.run_id = 12;
  v.meter_pid = 4321;
  v.start_unix_ms = kNow - 60'000;
  v.updated_unix_ms = kNow - 500;
  v.user = "alice";
  RunTargetView t;
  t.target = meter::MetricTarget{"loss", true, 2.2};
  t.forecast.verdict = meter::TargetVerdict::on_track;
  t.forecast.step = 140;
  t.forecast.current_value = 2.57;
  t.forecast.reached_at_step = 390;
  t.forecast.reached_at_s = 117.5;
  t.forecast.cost_to_reach_usd = 0.17;
  t.forecast.low_usd = 0.14;
  t.forecast.high_usd = 0.21;
  v.target = t;
  return v;
}

TEST(AgentRunView, RendersTheTargetSeriesOfARunOnTrack) {
  const std::string text = render_run_metrics({on_track_run()});
  const std::string id = "run_id=\"12\",pid=\"4321\"";
  for (const std::string& line : {
           "gpumeter_run_info{" + id + ",user=\"alice\"} 1\n",
           "gpumeter_run_target_info{" + id + ",metric=\"loss\",op=\"<=\",value=\"2.2\"} 1\n",
           "gpumeter_run_target_verdict{" + id + ",verdict=\"on_track\"} 1\n",
           "gpumeter_run_target_verdict{" + id + ",verdict=\"too_early\"} 0\n",
           "gpumeter_run_target_verdict{" + id + ",verdict=\"reached\"} 0\n",
           "gpumeter_run_target_verdict{" + id + ",verdict=\"unreachable_within_steps\"} 0\n",
           "gpumeter_run_target_verdict{" + id + ",verdict=\"unreachable_within_budget\"} 0\n",
           "gpumeter_run_target_reached{" + id + "} 0\n",
           "gpumeter_run_target_metric_value{" + id + "} 2.57\n",
           "gpumeter_run_target_forecast_step{" + id + "} 390\n",
           "gpumeter_run_target_forecast_seconds{" + id + "} 117.5\n",
           "gpumeter_run_target_cost_to_reach_usd{" + id + "} 0.17\n",
           "gpumeter_run_target_cost_to_reach_low_usd{" + id + "} 0.14\n",
           "gpumeter_run_target_cost_to_reach_high_usd{" + id + "} 0.21\n",
           std::string("# TYPE gpumeter_run_target_cost_to_reach_usd gauge\n"),
       })
    EXPECT_NE(text.find(line), std::string::npos) << line << "in\n" << text;
  // Every family is typed once, and none is a counter.
  EXPECT_EQ(text.find("_total"), std::string::npos);
  for (const std::string family : {"gpumeter_run_info", "gpumeter_run_target_verdict"}) {
    const std::string type = "# TYPE " + family + " gauge\n";
    const auto first = text.find(type);
    ASSERT_NE(first, std::string::npos) << family;
    EXPECT_EQ(text.find(type, first + 1), std::string::npos) << family;
  }
}

TEST(AgentRunView, OmitsWhatTheForecastDoesNotKnow) {
  RunView early = on_track_run();
  early.run_id = 0;  // not recorded in the ledger
  auto& f = early.target->forecast;
  f = meter::TargetForecast{};
  f.verdict = meter::TargetVerdict::too_early;
  f.current_value = 2.9;
  RunView unbounded = on_track_run();
  unbounded.meter_pid = 5000;
  unbounded.target->forecast.high_usd.reset();  // a plausible fit never reaches it
  RunView plain = on_track_run();
  plain.meter_pid = 6000;
  plain.target.reset();
  const std::string text = render_run_metrics({early, unbounded, plain});
  EXPECT_NE(text.find("gpumeter_run_target_verdict{run_id=\"\",pid=\"4321\",verdict=\"too_early\"} 1\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("gpumeter_run_target_metric_value{run_id=\"\",pid=\"4321\"} 2.9\n"), std::string::npos);
  for (const char* family :
       {"gpumeter_run_target_forecast_step{run_id=\"\"", "gpumeter_run_target_cost_to_reach_usd{run_id=\"\"",
        "gpumeter_run_target_cost_to_reach_low_usd{run_id=\"\"",
        "gpumeter_run_target_cost_to_reach_high_usd"})
    EXPECT_EQ(text.find(family), std::string::npos) << family << "\n" << text;
  EXPECT_NE(text.find("gpumeter_run_target_cost_to_reach_low_usd{run_id=\"12\",pid=\"5000\"} 0.14\n"),
            std::string::npos);
  // A run without a target has its info series and no target series.
  EXPECT_NE(text.find("gpumeter_run_info{run_id=\"12\",pid=\"6000\",user=\"alice\"} 1\n"), std::string::npos);
  EXPECT_EQ(text.find("pid=\"6000\"}"), std::string::npos);
  EXPECT_EQ(text.find("gpumeter_run_target_info{run_id=\"12\",pid=\"6000\""), std::string::npos);
  // No runs: no families at all, not even their HELP lines.
  EXPECT_EQ(render_run_metrics({}), "");
}

TEST(AgentRunView, EscapesTheMetricNameInLabels) {
  RunView v = on_track_run();
  v.target->target = meter::MetricTarget{"eval/\"acc\"\n", false, 0.9};
  const std::string text = render_run_metrics({v});
  EXPECT_NE(text.find("metric=\"eval/\\\"acc\\\"\\n\",op=\">=\",value=\"0.9\""), std::string::npos) << text;
}

TEST(AgentRunView, PublishedViewsRoundTripAndEndedRunsDropOut) {
  test::TempDir dir;
  const auto alive = [](std::int64_t pid) { return pid != 999; };
  RunView live = on_track_run();
  ASSERT_TRUE(publish_run_view(dir.path(), live));
  RunView stale = on_track_run();
  stale.meter_pid = 4322;
  stale.updated_unix_ms = kNow - kRunViewStaleMs - 1;
  ASSERT_TRUE(publish_run_view(dir.path(), stale));
  RunView dead = on_track_run();
  dead.meter_pid = 999;
  ASSERT_TRUE(publish_run_view(dir.path(), dead));
  RunView early = on_track_run();
  early.meter_pid = 17;
  early.target->forecast = meter::TargetForecast{};
  ASSERT_TRUE(publish_run_view(dir.path(), early));
  dir.write("run-55.json", "{\"run_id\": 3, \"meter_pid\":");  // torn or foreign: skipped
  dir.write("run-56.json", run_view_json(live));               // names another meter's PID
  dir.write("notes.txt", "not a run");

  auto views = read_run_views(dir.path(), kNow, alive);
  ASSERT_EQ(views.size(), 2u);
  EXPECT_EQ(views[0].meter_pid, 17);
  EXPECT_FALSE(views[0].target->forecast.cost_to_reach_usd.has_value());
  EXPECT_FALSE(views[0].target->forecast.current_value.has_value());
  const RunView& back = views[1];
  EXPECT_EQ(back.meter_pid, 4321);
  EXPECT_EQ(back.run_id, 12);
  EXPECT_EQ(back.start_unix_ms, live.start_unix_ms);
  EXPECT_FALSE(back.user.empty());  // the file's owner, whatever the file says
  ASSERT_TRUE(back.target.has_value());
  EXPECT_EQ(back.target->target.metric, "loss");
  EXPECT_TRUE(back.target->target.at_most);
  EXPECT_DOUBLE_EQ(back.target->target.threshold, 2.2);
  EXPECT_EQ(back.target->forecast.verdict, meter::TargetVerdict::on_track);
  EXPECT_EQ(back.target->forecast.step, 140);
  EXPECT_EQ(back.target->forecast.reached_at_step, 390);
  EXPECT_EQ(back.target->forecast.high_usd, 0.21);

  withdraw_run_view(dir.path(), 4321);
  EXPECT_FALSE(std::filesystem::exists(run_view_path(dir.path(), 4321)));
  views = read_run_views(dir.path(), kNow, alive);
  ASSERT_EQ(views.size(), 1u);
  EXPECT_EQ(views[0].meter_pid, 17);
  EXPECT_TRUE(read_run_views(dir.path() + "/absent", kNow, alive).empty());
}

TEST(AgentRunView, MalformedViewsNameTheFileAndTheField) {
  const auto bad = [](const std::string& text) {
    auto r = parse_run_view(text, "/run/gpumeter/runs/run-7.json");
    return r ? std::string() : r.error().message;
  };
  EXPECT_NE(bad("[]").find("run-7.json: not a JSON object"), std::string::npos);
  EXPECT_NE(bad("{\"run_id\":1}").find("\"meter_pid\""), std::string::npos);
  const std::string head = R"({"run_id":1,"meter_pid":7,"start_unix_ms":1,"updated_unix_ms":2,"target":)";
  EXPECT_NE(bad(head + R"({"metric":"loss","op":"<","value":1,"verdict":"on_track"}})").find("\"op\""),
            std::string::npos);
  EXPECT_NE(bad(head + R"({"metric":"loss","op":"<=","value":1,"verdict":"soon"}})").find("\"soon\""),
            std::string::npos);
  EXPECT_EQ(bad(head + "null}"), "");
}

// The live figures gpumeter mcp reads (spend, rate, budget, steps, the forecast with its interval and ETA,
// the job's PID, the control socket) round-trip; a view of an older gpumeter without them still reads.
TEST(AgentRunView, LiveFiguresAndTheControlSocketRoundTrip) {
  RunView v = on_track_run();
  v.job_pid = 4400;
  v.command = "python3 train.py --lr 3e-4";
  v.socket = "/tmp/gpumeter-abc/progress.sock";
  v.stopping = true;
  v.cost_micros = 420'123;
  v.usd_per_hour = 3.6;
  v.budget_micros = 2'500'000;
  v.steps = 120;
  v.total_steps = 1000;
  v.forecast = RunForecastView{1.1, 1.0, 1.3, 310.5};
  auto back = parse_run_view(run_view_json(v), "run-4321.json");
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->job_pid, 4400);
  EXPECT_EQ(back->command, v.command);
  EXPECT_EQ(back->socket, v.socket);
  EXPECT_TRUE(back->stopping);
  EXPECT_EQ(back->cost_micros, std::optional<MicroUsd>(420'123));
  EXPECT_EQ(back->budget_micros, std::optional<MicroUsd>(2'500'000));
  EXPECT_EQ(back->usd_per_hour, std::optional<double>(3.6));
  EXPECT_EQ(back->steps, std::optional<std::int64_t>(120));
  EXPECT_EQ(back->total_steps, std::optional<std::int64_t>(1000));
  ASSERT_TRUE(back->forecast);
  EXPECT_DOUBLE_EQ(back->forecast->low_usd, 1.0);
  EXPECT_DOUBLE_EQ(back->forecast->remaining_s, 310.5);
  auto old =
      parse_run_view(R"({"run_id":1,"meter_pid":7,"start_unix_ms":1,"updated_unix_ms":2})", "run-7.json");
  ASSERT_TRUE(old);
  EXPECT_EQ(old->socket, "");
  EXPECT_FALSE(old->cost_micros);
  EXPECT_FALSE(old->forecast);
  auto torn = parse_run_view(
      R"({"run_id":1,"meter_pid":7,"start_unix_ms":1,"updated_unix_ms":2,"forecast":{"total_usd":1}})",
      "run-7.json");
  ASSERT_FALSE(torn);
  EXPECT_NE(torn.error().message.find("forecast"), std::string::npos);
}

TEST(AgentRunView, ProcessAliveTellsThisProcessFromNone) {
  EXPECT_TRUE(process_alive(::getpid()));
  EXPECT_FALSE(process_alive(0));
  EXPECT_FALSE(process_alive(-5));
}

}  // namespace
}  // namespace gm::agent
