// Unit tests of src/report: KPIs, multi-run aggregation and the compare gate, against hand computations.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "report/gate.h"
#include "report/html.h"
#include "report/kpi.h"
#include "report/multi.h"
#include "report/run_report.h"
#include "support/fakes.h"

namespace gm {
namespace {

store::ProgressRecord point(std::int64_t t_ms, std::optional<std::int64_t> step,
                            std::optional<std::int64_t> samples, std::optional<std::int64_t> tokens,
                            std::map<std::string, double> metrics, MicroUsd cost) {
  store::ProgressRecord p;
  p.t_ms = t_ms;
  p.step = step;
  p.samples = samples;
  p.tokens = tokens;
  p.metrics = std::move(metrics);
  p.cost_micros = cost;
  return p;
}

TEST(ReportKpi, ParsesTargets) {
  auto t = meter::parse_metric_target("acc=0.9");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->metric, "acc");
  EXPECT_FALSE(t->at_most);
  EXPECT_DOUBLE_EQ(t->threshold, 0.9);
  auto l = meter::parse_metric_target("val/loss<=1.75");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->metric, "val/loss");
  EXPECT_TRUE(l->at_most);
  EXPECT_DOUBLE_EQ(l->threshold, 1.75);
  for (const char* bad : {"acc", "acc=", "=0.9", "acc=abc", "acc<0.9", "a c=1", "acc=>0.9"}) {
    auto r = meter::parse_metric_target(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().kind, ErrorKind::usage);
    EXPECT_NE(r.error().message.find("--target"), std::string::npos) << r.error().message;
    EXPECT_NE(r.error().message.find(bad), std::string::npos) << r.error().message;
  }
}

TEST(ReportKpi, CostToTargetIsSpendAtFirstPointMeetingIt) {
  std::vector<store::ProgressRecord> pr = {
      point(30'000, 300, {}, {}, {{"acc", 0.91}}, 30'000'000),  // out of order on purpose
      point(10'000, 100, {}, {}, {{"acc", 0.50}}, 10'000'000),
      point(20'000, 200, {}, {}, {{"acc", 0.90}}, 20'000'000),
      point(25'000, 250, {}, {}, {{"loss", 1.0}}, 25'000'000),
  };
  auto hit = report::cost_to_target(pr, *meter::parse_metric_target("acc=0.9"));
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->t_ms, 20'000);
  EXPECT_EQ(hit->step, 200);
  EXPECT_EQ(hit->cost_micros, 20'000'000);
  EXPECT_FALSE(report::cost_to_target(pr, *meter::parse_metric_target("acc>=0.95")));
  auto loss = report::cost_to_target(pr, *meter::parse_metric_target("loss<=1.0"));
  ASSERT_TRUE(loss);
  EXPECT_EQ(loss->cost_micros, 25'000'000);
  EXPECT_FALSE(report::cost_to_target(pr, *meter::parse_metric_target("f1=0.1")));
}

TEST(ReportKpi, CostPerUnitsMatchesHandComputation) {
  store::RunRecord run;
  run.cost_micros = 12'500'000;  // $12.50
  run.gpus_allocated = {"GPU-a", "GPU-b"};
  run.labels["params"] = "1e9";
  std::vector<store::ProgressRecord> pr = {point(10'000, 10, 5'000, 2'000'000, {}, 2'500'000),
                                           point(50'000, 50, 25'000, 10'000'000, {}, 12'500'000)};
  catalog::GpuSpec h100;
  h100.id = "H100 SXM 80GB";
  h100.bf16_dense_tflops = 989.0;
  auto k = report::compute_kpis(run, pr, &h100, {});
  // $12.50 / 25 000 samples × 1000 = $0.50 per 1k samples; $12.50 / 10M tokens × 1M = $1.25 per 1M tokens.
  ASSERT_TRUE(k.usd_per_1k_samples);
  EXPECT_DOUBLE_EQ(*k.usd_per_1k_samples, 0.5);
  ASSERT_TRUE(k.usd_per_1m_tokens);
  EXPECT_DOUBLE_EQ(*k.usd_per_1m_tokens, 1.25);
  EXPECT_DOUBLE_EQ(*k.usd_per_step, 0.25);
  // tokens/s = (10M − 2M) / 40 s = 200 000; FLOPs/token = 6e9; MFU = 2e5 × 6e9 / (989e12 × 2) = 0.000606673...
  ASSERT_TRUE(k.tokens_per_s);
  EXPECT_DOUBLE_EQ(*k.tokens_per_s, 200'000.0);
  EXPECT_DOUBLE_EQ(*k.samples_per_s, 500.0);
  ASSERT_TRUE(k.mfu) << k.mfu_note;
  EXPECT_NEAR(*k.mfu, 200'000.0 * 6e9 / (989e12 * 2), 1e-15);
  // --params overrides the label; inference uses 2 × params.
  report::KpiOptions o;
  o.params = 7e9;
  o.training = false;
  auto ki = report::compute_kpis(run, pr, &h100, o);
  EXPECT_NEAR(*ki.mfu, 200'000.0 * 14e9 / (989e12 * 2), 1e-15);
  // No progress → no KPIs, never zeros.
  auto none = report::compute_kpis(run, {}, &h100, {});
  EXPECT_FALSE(none.usd_per_1k_samples);
  EXPECT_FALSE(none.usd_per_1m_tokens);
  EXPECT_FALSE(none.mfu);
  EXPECT_NE(none.mfu_note.find("token"), std::string::npos);
  catalog::GpuSpec unknown;
  unknown.id = "X";
  auto nopeak = report::compute_kpis(run, pr, &unknown, {});
  EXPECT_FALSE(nopeak.mfu);
}

TEST(ReportKpi, DensePeakPrefersBf16) {
  catalog::GpuSpec g;
  g.fp32_tflops = 60;
  EXPECT_DOUBLE_EQ(*report::dense_peak_flops(g), 60e12);
  g.tf32_dense_tflops = 400;
  EXPECT_DOUBLE_EQ(*report::dense_peak_flops(g), 400e12);
  g.bf16_dense_tflops = 989;
  EXPECT_DOUBLE_EQ(*report::dense_peak_flops(g), 989e12);
  EXPECT_FALSE(report::dense_peak_flops(catalog::GpuSpec{}));
}

TEST(ReportKpi, ScalingEfficiencyAcrossGpuCounts) {
  auto mk = [](std::int64_t id, std::size_t gpus, std::int64_t tokens_at_100s, MicroUsd cost) {
    report::ScalingInput in;
    in.run.id = id;
    in.run.gpus_allocated.assign(gpus, "GPU");
    in.run.cost_micros = cost;
    in.run.wall_ms = 100'000;
    in.progress = {point(0, 0, {}, 0, {}, 0), point(100'000, 100, {}, tokens_at_100s, {}, cost)};
    return in;
  };
  // 1 GPU: 1000 tok/s; 2 GPUs: 1800 tok/s; 4 GPUs: 3000 tok/s.
  auto s = report::scaling_study(
      {mk(3, 4, 300'000, 4'000'000), mk(1, 1, 100'000, 1'000'000), mk(2, 2, 180'000, 2'000'000)});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->unit, "tokens");
  ASSERT_EQ(s->rows.size(), 3u);
  EXPECT_EQ(s->rows[0].run_id, 1);
  EXPECT_DOUBLE_EQ(s->rows[1].speedup, 1.8);
  EXPECT_DOUBLE_EQ(s->rows[1].efficiency, 0.9);
  EXPECT_DOUBLE_EQ(s->rows[2].speedup, 3.0);
  EXPECT_DOUBLE_EQ(s->rows[2].efficiency, 0.75);
  // $ per token: 1e-5, 2e6/180000 µ$ ... ratio = (2/180000)/(1/100000) = 1.1111
  EXPECT_NEAR(*s->rows[1].cost_ratio, (2.0 / 180'000) / (1.0 / 100'000), 1e-12);
  EXPECT_FALSE(report::scaling_study({mk(1, 1, 1, 1)}).ok());
}

store::RunRecord run_rec(std::int64_t id, std::string user, std::string gpu, std::size_t gpus,
                         std::int64_t start_ms, std::int64_t wall_ms, MicroUsd cost, MicroUsd idle,
                         MicroUsd unused, double energy_j, std::optional<double> co2,
                         std::map<std::string, std::string> labels = {},
                         std::string command = "python train.py --lr 3") {
  store::RunRecord r;
  r.id = id;
  r.user = std::move(user);
  r.gpu_model = std::move(gpu);
  r.gpus_allocated.assign(gpus, "GPU");
  r.start_unix_ms = start_ms;
  r.end_unix_ms = start_ms + wall_ms;
  r.wall_ms = wall_ms;
  r.billed_s = wall_ms / 1000;
  r.cost_micros = cost;
  r.idle_cost_micros = idle;
  r.unused_gpu_cost_micros = unused;
  r.energy_j = energy_j;
  r.co2_kg = co2;
  r.labels = std::move(labels);
  r.command = std::move(command);
  r.status = store::RunStatus::finished;
  r.exit_code = 0;
  return r;
}

constexpr std::int64_t kDay = 86'400'000;
constexpr std::int64_t kDay0 = 20'000 * kDay;  // 2024-10-04 00:00 UTC

test::MemoryLedger sample_ledger() {
  test::MemoryLedger l;
  l.add_run(run_rec(1, "ana", "H100 SXM 80GB", 1, kDay0 + 3'600'000, 100'000, 100'000'000, 10'000'000, 0, 3.6e6, 0.4,
                    {{"team", "nlp"}}));
  l.add_run(run_rec(2, "bob", "A100 SXM 40GB", 2, kDay0 + 7'200'000, 50'000, 40'000'000, 5'000'000, 20'000'000, 7.2e6,
                    std::nullopt, {{"team", "cv"}}, "/usr/bin/bash run.sh"));
  l.add_run(run_rec(3, "ana", "H100 SXM 80GB", 1, kDay0 + kDay + 60'000, 10'000, 7'000'000, 0, 0, 0, 0.1, {},
                    "./bench --x"));
  l.add_run(run_rec(4, "cid", "H100 SXM 80GB", 1, kDay0 - 1, 10'000, 999'000'000, 0, 0, 0, 0.0));  // before period
  store::RollupRecord ru;
  ru.run_id = 1;
  ru.minute_unix = (kDay0 + 3'600'000) / 60'000;
  ru.samples = 60;
  ru.utilization_sum_pct = 60 * 80.0;
  l.add_rollup(ru);
  ru.run_id = 2;
  ru.samples = 40;
  ru.utilization_sum_pct = 40 * 30.0;
  l.add_rollup(ru);
  return l;
}

TEST(ReportMulti, TotalsPerGroupAreExact) {
  auto l = sample_ledger();
  report::MultiOptions o;
  o.since_unix_ms = kDay0;
  o.until_unix_ms = kDay0 + 2 * kDay;
  o.by = *report::parse_group_by("user");
  auto rep = report::build_multi_report(l, o);
  ASSERT_TRUE(rep.ok()) << rep.error().message;
  EXPECT_EQ(rep->total.runs, 3);
  EXPECT_EQ(rep->total.cost_micros, 147'000'000);
  EXPECT_EQ(rep->total.idle_cost_micros, 15'000'000);
  EXPECT_EQ(rep->total.unused_gpu_cost_micros, 20'000'000);
  EXPECT_EQ(rep->total.waste_micros(), 35'000'000);
  EXPECT_DOUBLE_EQ(rep->total.energy_kwh, 3.0);
  EXPECT_DOUBLE_EQ(*rep->total.co2_kg, 0.5);
  EXPECT_EQ(rep->total.runs_without_co2, 1);
  // GPU-h: 100 s × 1 + 50 s × 2 + 10 s × 1 = 210 GPU-s.
  EXPECT_DOUBLE_EQ(rep->total.gpu_hours, 210.0 / 3600.0);
  // Utilization from rollups: (60×80 + 40×30) / 100 = 60 %.
  EXPECT_DOUBLE_EQ(*rep->total.mean_util_pct(), 60.0);
  ASSERT_EQ(rep->groups.size(), 2u);
  EXPECT_EQ(rep->groups[0].key, "ana");
  EXPECT_EQ(rep->groups[0].runs, 2);
  EXPECT_EQ(rep->groups[0].cost_micros, 107'000'000);
  EXPECT_DOUBLE_EQ(*rep->groups[0].mean_util_pct(), 80.0);
  // Timeline from rollups: both rollups fall in the hour 01:00 of day 0 (the period spans 2 days → hourly).
  EXPECT_EQ(rep->bucket_ms, 3'600'000);
  ASSERT_EQ(rep->timeline.size(), 1u);
  EXPECT_EQ(rep->timeline[0].start_unix_ms, kDay0 + 3'600'000);
  EXPECT_EQ(rep->timeline[0].util_samples, 100);
  EXPECT_EQ(rep->groups[1].key, "bob");
  EXPECT_EQ(rep->groups[1].cost_micros, 40'000'000);
  EXPECT_FALSE(rep->groups[1].co2_kg);
  ASSERT_EQ(rep->top_runs.size(), 3u);
  EXPECT_EQ(rep->top_runs[0].id, 1);
  EXPECT_EQ(rep->top_runs[1].id, 2);
  EXPECT_EQ(rep->top_runs[1].waste_micros, 25'000'000);

  auto j = nlohmann::json::parse(report::render_multi_json(*rep));
  EXPECT_DOUBLE_EQ(j["total"]["cost_usd"].get<double>(), 147.0);
  EXPECT_DOUBLE_EQ(j["total"]["waste_usd"].get<double>(), 35.0);
  EXPECT_TRUE(j["groups"][1]["co2_kg"].is_null());
  EXPECT_EQ(j["by"], "user");
  auto csv = report::render_multi_csv(*rep);
  EXPECT_NE(csv.find("ana,2,"), std::string::npos) << csv;
  EXPECT_NE(csv.find("TOTAL,3,"), std::string::npos) << csv;
  auto text = report::render_multi_text(*rep);
  EXPECT_NE(text.find("$147.00"), std::string::npos) << text;
}

TEST(ReportMulti, GroupsByLabelGpuDayAndCommand) {
  auto l = sample_ledger();
  report::MultiOptions o;
  o.since_unix_ms = kDay0;
  auto keys = [&](const char* by) {
    o.by = *report::parse_group_by(by);
    auto rep = report::build_multi_report(l, o);
    std::map<std::string, MicroUsd> m;
    for (const auto& g : rep->groups) m[g.key] = g.cost_micros;
    return m;
  };
  EXPECT_EQ(keys("label:team"), (std::map<std::string, MicroUsd>{
                                    {"nlp", 100'000'000}, {"cv", 40'000'000}, {"(no team)", 7'000'000}}));
  EXPECT_EQ(keys("gpu"), (std::map<std::string, MicroUsd>{{"H100 SXM 80GB", 107'000'000},
                                                           {"A100 SXM 40GB", 40'000'000}}));
  EXPECT_EQ(keys("day"), (std::map<std::string, MicroUsd>{{"2024-10-04", 140'000'000}, {"2024-10-05", 7'000'000}}));
  EXPECT_EQ(keys("command"), (std::map<std::string, MicroUsd>{
                                 {"python train.py", 100'000'000}, {"bash run.sh", 40'000'000}, {"bench", 7'000'000}}));
  EXPECT_FALSE(report::parse_group_by("team").ok());
  EXPECT_FALSE(report::parse_group_by("label:").ok());
  // Slurm jobs recorded by the epilog (record-job) carry slurm.account and slurm.partition labels.
  EXPECT_EQ(report::parse_group_by("slurm-account")->label_key, "slurm.account");
  EXPECT_EQ(report::parse_group_by("partition")->label_key, "slurm.partition");
  EXPECT_EQ(report::parse_group_by("slurm-partition")->kind, report::GroupBy::Kind::label);
}

TEST(ReportMulti, PeriodsAndDailyReport) {
  auto l = sample_ledger();
  auto day = report::daily_period(std::nullopt,
                                  kDay0 + kDay + 5 * 3'600'000);  // "now" is day 1, 05:00 → yesterday = day 0
  ASSERT_TRUE(day.ok());
  EXPECT_EQ(day->first, kDay0);
  EXPECT_EQ(day->second, kDay0 + kDay);
  auto d2 = report::daily_period(std::string("2024-10-05"), 0);
  ASSERT_TRUE(d2.ok());
  EXPECT_EQ(d2->first, kDay0 + kDay);
  EXPECT_FALSE(report::daily_period(std::string("2024-13-01"), 0).ok());
  EXPECT_FALSE(report::daily_period(std::string("yesterday"), 0).ok());
  report::MultiOptions o;
  o.since_unix_ms = day->first;
  o.until_unix_ms = day->second;
  auto rep = report::build_multi_report(l, o);
  EXPECT_EQ(rep->total.runs, 2);
  EXPECT_EQ(rep->total.cost_micros, 140'000'000);
  o.since_unix_ms = kDay0 + 10 * kDay;
  o.until_unix_ms = kDay0 + 11 * kDay;
  auto empty = report::build_multi_report(l, o);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->total.runs, 0);
  o.until_unix_ms = o.since_unix_ms;
  EXPECT_EQ(report::build_multi_report(l, o).error().kind, ErrorKind::usage);

  EXPECT_EQ(*report::parse_time_point("7d", 10 * kDay, "--since"), 3 * kDay);
  EXPECT_EQ(*report::parse_time_point("2024-10-04", 0, "--since"), kDay0);
  EXPECT_EQ(*report::parse_time_point("2024-10-04T01:02:03", 0, "--since"), kDay0 + 3'723'000);
  auto bad = report::parse_time_point("last week", 0, "--since");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("--since 'last week'"), std::string::npos);
  EXPECT_EQ(report::format_time_utc(kDay0 + 3'723'000), "2024-10-04 01:02:03");
}

report::CompareSide side(std::int64_t id, MicroUsd cost, std::map<std::string, double> metrics,
                         std::int64_t tokens = 1'000'000) {
  report::CompareSide s;
  s.run.id = id;
  s.run.cost_micros = cost;
  s.run.wall_ms = 60'000;
  s.progress = {point(60'000, 100, {}, tokens, std::move(metrics), cost)};
  return s;
}

TEST(ReportCompare, GatePassFailAndMissingMetric) {
  report::GateOptions gate;
  gate.max_cost_increase_pct = *report::parse_cost_increase_pct("20%");
  gate.min_gains.push_back(*report::parse_min_gain("acc=2%"));
  // +15 % cost, acc 0.80 → 0.82 (+2.5 %): pass.
  auto pass =
      report::compare_runs(side(1, 10'000'000, {{"acc", 0.80}}), side(2, 11'500'000, {{"acc", 0.82}}), gate);
  ASSERT_TRUE(pass.ok());
  EXPECT_TRUE(pass->pass) << report::render_compare_text(*pass);
  // Exactly +20 % passes (limit inclusive).
  EXPECT_TRUE(
      report::compare_runs(side(1, 10'000'000, {{"acc", 0.80}}), side(2, 12'000'000, {{"acc", 0.82}}), gate)
          ->pass);
  // +25 % cost: fail.
  auto fail =
      report::compare_runs(side(1, 10'000'000, {{"acc", 0.80}}), side(2, 12'500'000, {{"acc", 0.82}}), gate);
  ASSERT_TRUE(fail.ok());
  EXPECT_FALSE(fail->pass);
  ASSERT_EQ(fail->failures.size(), 1u);
  EXPECT_NE(fail->failures[0].find("cost"), std::string::npos);
  // acc gain +1 %: fail.
  EXPECT_FALSE(
      report::compare_runs(side(1, 10'000'000, {{"acc", 0.80}}), side(2, 10'000'000, {{"acc", 0.808}}), gate)
          ->pass);
  // Missing metric on B: usage error.
  auto missing =
      report::compare_runs(side(1, 10'000'000, {{"acc", 0.8}}), side(2, 10'000'000, {{"loss", 1.0}}), gate);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().kind, ErrorKind::usage);
  EXPECT_NE(missing.error().message.find("run 2 has no metric 'acc'"), std::string::npos);
  // loss must fall by 5 %: 2.0 → 1.9 is exactly −5 %.
  report::GateOptions lg;
  lg.min_gains.push_back(*report::parse_min_gain("loss=-5%"));
  EXPECT_TRUE(report::compare_runs(side(1, 1, {{"loss", 2.0}}), side(2, 1, {{"loss", 1.9}}), lg)->pass);
  EXPECT_FALSE(report::compare_runs(side(1, 1, {{"loss", 2.0}}), side(2, 1, {{"loss", 1.95}}), lg)->pass);
  // Absolute gain.
  report::GateOptions ab;
  ab.min_gains.push_back(*report::parse_min_gain("acc=+0.05"));
  EXPECT_TRUE(report::compare_runs(side(1, 1, {{"acc", 0.5}}), side(2, 1, {{"acc", 0.55}}), ab)->pass);
  EXPECT_FALSE(report::compare_runs(side(1, 1, {{"acc", 0.5}}), side(2, 1, {{"acc", 0.54}}), ab)->pass);
  // KPI rows: $/1M tokens from cost and tokens: $10 / 1M tokens = $10; $11.5.
  auto j = nlohmann::json::parse(report::render_compare_json(*pass));
  bool found = false;
  for (const auto& row : j["rows"])
    if (row["name"] == "usd_per_1m_tokens") {
      found = true;
      EXPECT_DOUBLE_EQ(row["a"].get<double>(), 10.0);
      EXPECT_DOUBLE_EQ(row["b"].get<double>(), 11.5);
    }
  EXPECT_TRUE(found);
  EXPECT_TRUE(j["pass"].get<bool>());
  for (const char* bad : {"acc", "acc=x", "=2%"}) EXPECT_FALSE(report::parse_min_gain(bad).ok()) << bad;
  EXPECT_FALSE(report::parse_cost_increase_pct("lots").ok());
}

TEST(ReportRobustness, LongRunPagesAreBucketed) {
  report::RunHtmlInput in;
  in.run.id = 1;
  in.run.cost_micros = 10'000 * 2;
  for (std::int64_t t = 1; t <= 10'000; ++t)
    for (unsigned g = 0; g < 2; ++g) {
      store::SampleRecord s;
      s.t_ms = t * 1000;
      s.gpu_index = g;
      s.utilization_pct = 50;
      s.cost_micros = 1;
      in.samples.push_back(s);
    }
  auto page = report::render_run_html(in);
  ASSERT_TRUE(page.ok()) << page.error().message;  // scripts/setup.sh fetches the charting library
  EXPECT_NE(page->find("charts show 3-second buckets (10000 samples per GPU)"), std::string::npos);
  // The cumulative cost still ends at the exact total: 20 000 µ$ = 0.02 USD.
  EXPECT_NE(page->find("0.02]"), std::string::npos);
  EXPECT_LT(page->size(), 400'000u);
}

TEST(ReportRobustness, ForeignBytesAndTypesNeverThrow) {
  test::MemoryLedger l;
  l.add_run(run_rec(1, "ana", "H100", 1, kDay0, 1000, 1, 0, 0, 0, std::nullopt, {}, "python \xff\xfe.py"));
  report::MultiOptions o;
  o.by = *report::parse_group_by("command");
  auto rep = report::build_multi_report(l, o);
  ASSERT_TRUE(rep.ok());
  auto j = nlohmann::json::parse(report::render_multi_json(*rep));
  EXPECT_EQ(j["total"]["runs"], 1);
  auto page = report::render_multi_html(*rep);
  ASSERT_TRUE(page.ok()) << page.error().message;
  EXPECT_EQ(page->find("\xff"), std::string::npos);
}

}  // namespace
}  // namespace gm

namespace gm {
namespace {

/// A one-GPU run on `model` at `usd_per_hour` whose job peaked at `peak_gib`.
store::RunRecord rightsizing_run(const std::string& model, std::int64_t usd_per_hour, meter::GpuUsage& gpu,
                                 double peak_gib) {
  store::RunRecord run;
  run.id = 1;
  run.status = store::RunStatus::finished;
  run.gpu_model = model;
  run.price_micros_per_gpu_hour = usd_per_hour * 1'000'000;
  run.gpus_allocated = {"GPU-a"};
  run.gpus_used = {"GPU-a"};
  run.wall_ms = 3'600'000;
  run.billed_s = 3600;
  run.cost_micros = usd_per_hour * 1'000'000;
  gpu.used = true;
  gpu.util_avg_pct = 95;
  gpu.busy_s = 3420;
  gpu.mem_peak_bytes = static_cast<std::uint64_t>(peak_gib * (1ULL << 30));
  return run;
}

TEST(ReportRightsizing, ComparesReferencePricesOfBothGpusNotTheRunsOwnRate) {
  // A run on an H100 SXM charged $36/GPU-h (an internal rate ten times the market): its 59.6 GiB peak fits
  // a smaller GPU, but the saving is the catalog's price difference between the two GPUs, not $36 against
  // a market price (that would claim 90 % savings from the rate alone).
  const catalog::Catalog catalog = *catalog::Catalog::builtin();
  meter::GpuUsage gpu;
  const store::RunRecord run = rightsizing_run("H100 SXM 80GB", 36, gpu, 59.6);
  const report::RunReport r = report::build_run_report(run, {gpu}, {}, {}, &catalog, {});
  ASSERT_TRUE(r.rightsizing.has_value());
  const auto current = catalog.reference_price("H100 SXM 80GB");
  const auto candidate = catalog.reference_price(r.rightsizing->gpu);
  ASSERT_TRUE(current && candidate);
  EXPECT_DOUBLE_EQ(r.rightsizing->price_ratio, candidate->usd_per_gpu_hour / current->usd_per_gpu_hour);
  EXPECT_GT(r.rightsizing->price_ratio, 0.3);  // not 0.09 (a market price against $36)
  EXPECT_NE(r.rightsizing->price_basis.find("catalog reference prices"), std::string::npos);
  const auto f = std::find_if(r.findings.begin(), r.findings.end(),
                              [](const findings::Finding& x) { return x.kind == "rightsizing"; });
  ASSERT_NE(f, r.findings.end());
  ASSERT_TRUE(f->cost_nano_usd.has_value());
  EXPECT_NEAR(static_cast<double>(*f->cost_nano_usd) / 1e9, 36.0 * (1.0 - r.rightsizing->price_ratio), 1e-3);
  // The candidate holds the peak with the 20 % headroom and is cheaper than the run's GPU.
  EXPECT_GE(static_cast<double>(r.rightsizing->gpu_memory_bytes), 59.6 * 1.2 * (1ULL << 30));
  EXPECT_LT(candidate->usd_per_gpu_hour, current->usd_per_gpu_hour);
}

TEST(ReportRightsizing, AGpuWithoutACatalogPriceIsComparedWithTheRunsPriceAndSaysSo) {
  const catalog::Catalog catalog = *catalog::Catalog::builtin();
  meter::GpuUsage gpu;
  const store::RunRecord run = rightsizing_run("Prototype accelerator", 40, gpu, 10);
  const report::RunReport r = report::build_run_report(run, {gpu}, {}, {}, &catalog, {});
  ASSERT_TRUE(r.rightsizing.has_value());
  const auto candidate = catalog.reference_price(r.rightsizing->gpu);
  ASSERT_TRUE(candidate);
  EXPECT_DOUBLE_EQ(r.rightsizing->price_ratio, candidate->usd_per_gpu_hour / 40.0);
  EXPECT_NE(r.rightsizing->price_basis.find("this run's price"), std::string::npos)
      << r.rightsizing->price_basis;
}

}  // namespace
}  // namespace gm
