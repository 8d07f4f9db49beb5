#include "meter/run_meter.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>

#include "report/run_report.h"
#include "support/fakes.h"
#include "support/support.h"

namespace gm {
namespace {

gpu::StaticGpuBackend two_gpus() {
  gpu::StaticGpuBackend b;
  for (unsigned i = 0; i < 2; ++i) {
    b.infos.push_back(test::h100_info(i));
    b.caps.emplace_back();
    gpu::DeviceSample s;
    s.index = i;
    s.utilization_pct = i == 0 ? 75u : 0u;
    s.memory_used_bytes = (i == 0 ? 40ull : 1ull) << 30;
    b.samples.push_back(s);
  }
  b.samples[0].processes.push_back(gpu::ProcessSample{4242, 39ull << 30, 75});
  return b;
}

TEST(RunMeterTest, AllocatedGpusFromCudaVisibleDevices) {
  auto b = two_gpus();
  EXPECT_EQ(*meter::allocated_gpus(std::nullopt, b.infos), (std::vector<unsigned>{0, 1}));
  EXPECT_EQ(*meter::allocated_gpus(std::string("1"), b.infos), (std::vector<unsigned>{1}));
  EXPECT_EQ(*meter::allocated_gpus(std::string("GPU-1,0"), b.infos), (std::vector<unsigned>{1, 0}));
  EXPECT_TRUE(meter::allocated_gpus(std::string(""), b.infos)->empty());
  auto bad = meter::allocated_gpus(std::string("7"), b.infos);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("'7'"), std::string::npos);
}

TEST(RunMeterTest, MetersCostUsageIdleAndUsedGpus) {
  auto b = two_gpus();
  const MicroUsd price = 3'600'000'000;  // $3600/GPU-h = $1/GPU-s
  meter::RunMeter m(b, {0, 1}, price, 0);
  std::vector<store::SampleRecord> all;
  for (int s = 1; s <= 4; ++s) {
    auto recs = m.tick(static_cast<std::int64_t>(s) * 1'000'000'000, {4242});
    ASSERT_EQ(recs.size(), 2u);
    EXPECT_EQ(recs[0].cost_micros, 1'000'000);
    EXPECT_TRUE(recs[0].job_present);
    EXPECT_FALSE(recs[1].job_present);
    all.insert(all.end(), recs.begin(), recs.end());
  }
  EXPECT_EQ(m.spent_micros(), 8'000'000);
  EXPECT_EQ(m.spent_at(4'500'000'000), 9'000'000);
  EXPECT_DOUBLE_EQ(m.burn_usd_per_s(), 2.0);
  EXPECT_EQ(m.used_uuids(), (std::vector<std::string>{"GPU-0"}));
  const auto& u = m.usage();
  EXPECT_DOUBLE_EQ(*u[0].util_avg_pct, 75.0);
  EXPECT_DOUBLE_EQ(u[0].busy_s, 3.0);
  EXPECT_EQ(u[0].idle_cost_micros, 1'000'000);  // 25 % of $4
  EXPECT_EQ(*u[0].mem_peak_bytes, 40ull << 30);
  EXPECT_FALSE(m.idle_for_ms(4'000'000'000).has_value()) << "GPU 0 is busy";
  // The same figures from the ledger's samples.
  auto from = meter::gpu_usage_from_samples(all);
  ASSERT_EQ(from.size(), 2u);
  EXPECT_EQ(from[0].idle_cost_micros, u[0].idle_cost_micros);
  EXPECT_DOUBLE_EQ(from[0].busy_s, u[0].busy_s);
  EXPECT_TRUE(from[0].used);
  EXPECT_FALSE(from[1].used);
}

TEST(RunMeterTest, IdleTimeCountsWhileEveryGpuIsIdle) {
  auto b = two_gpus();
  b.samples[0].utilization_pct = 4u;  // under 5 %
  meter::RunMeter m(b, {0, 1}, 1'000'000, 0);
  EXPECT_FALSE(m.idle_for_ms(0));
  m.tick(1'000'000'000, {});
  m.tick(2'000'000'000, {});
  EXPECT_EQ(*m.idle_for_ms(2'500'000'000), 2'500);
  b.samples[1].utilization_pct = 50u;
  m.tick(3'000'000'000, {});
  EXPECT_FALSE(m.idle_for_ms(3'000'000'000));
  b.samples[1].utilization_pct = std::nullopt;  // unknown is not idle
  m.tick(4'000'000'000, {});
  EXPECT_FALSE(m.idle_for_ms(4'000'000'000));
}

TEST(RunReportTest, ReportFiguresAndJsonKeys) {
  store::RunRecord run;
  run.id = 3;
  run.command = "python train.py";
  run.status = store::RunStatus::stopped;
  run.exit_code = 0;
  run.stopped_by = "budget";
  run.wall_ms = 10'000;
  run.billed_s = 10;
  run.cost_micros = 20'000'000;
  run.unused_gpu_cost_micros = 10'000'000;
  run.price_micros_per_gpu_hour = 3'600'000'000;
  run.price_source = "--price";
  run.gpus_allocated = {"GPU-0", "GPU-1"};
  run.gpus_used = {"GPU-0"};
  run.energy_j = 3.6e6;
  run.energy_method = store::RunEnergyMethod::counter;
  meter::GpuUsage g0;
  g0.uuid = "GPU-0";
  g0.used = true;
  g0.busy_s = 5;
  g0.util_avg_pct = 50;
  g0.idle_cost_micros = 2'500'000;
  meter::GpuUsage g1;
  g1.index = 1;
  g1.uuid = "GPU-1";
  g1.util_avg_pct = 0;
  g1.idle_cost_micros = 5'000'000;  // not counted: never used
  store::ProgressRecord p;
  p.step = 100;
  p.total_steps = 1000;
  p.samples = 3200;
  p.tokens = 2'000'000;
  store::ActionRecord a{3, 5000, store::ActionKind::stop_budget, 10'000'000, "budget reached"};
  auto r = report::build_run_report(run, {g0, g1}, {p}, {a}, nullptr);
  EXPECT_DOUBLE_EQ(r.idle_cost_usd, 2.5);
  EXPECT_DOUBLE_EQ(r.unused_gpu_cost_usd, 10.0);
  EXPECT_DOUBLE_EQ(*r.effective_utilization, 5.0 / 20.0);
  EXPECT_DOUBLE_EQ(*r.usd_per_step, 0.2);
  EXPECT_DOUBLE_EQ(*r.usd_per_1k_samples, 20.0 / 3.2);
  EXPECT_DOUBLE_EQ(*r.usd_per_1m_tokens, 10.0);
  auto j = nlohmann::json::parse(report::render_run_report_json(r));
  for (const char* key : {"run_id", "command", "exit_code", "stopped_by", "wall_s", "billed_s", "cost_usd",
                          "price_usd_per_gpu_hour", "price_source", "gpus_allocated", "gpus_used", "idle_cost_usd",
                          "unused_gpu_cost_usd", "energy_kwh", "energy_method", "co2_kg", "steps", "total_steps",
                          "forecast_cost_usd", "actions"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["stopped_by"], "budget");
  EXPECT_DOUBLE_EQ(j["energy_kwh"].get<double>(), 1.0);
  EXPECT_TRUE(j["co2_kg"].is_null());
  EXPECT_TRUE(j["forecast_cost_usd"].is_null());
  EXPECT_DOUBLE_EQ(j["actions"][0]["t_s"].get<double>(), 5.0);
  EXPECT_EQ(j["actions"][0]["kind"], "stop_budget");
  const std::string csv = report::render_run_report_csv(r);
  EXPECT_NE(csv.find("run_id,command,"), std::string::npos);
  EXPECT_NE(csv.find("\"python train.py\""), std::string::npos);
  const std::string text = report::render_run_report_text(r, true);
  EXPECT_NE(text.find("SIMULATED"), std::string::npos);
  EXPECT_NE(text.find("stopped by budget"), std::string::npos);
}

}  // namespace
}  // namespace gm

namespace gm {
namespace {

/// A run of `seconds` s on one allocated and used GPU at $3.60 per GPU-hour ($0.001 a second).
store::RunRecord one_gpu_run(std::int64_t seconds) {
  store::RunRecord run;
  run.wall_ms = seconds * 1000;
  run.billed_s = seconds;
  run.cost_micros = seconds * 1000;
  run.price_micros_per_gpu_hour = 3'600'000;
  run.gpus_allocated = {"GPU-0"};
  run.gpus_used = {"GPU-0"};
  return run;
}

TEST(RunIdleStretchTest, TheLongestIdleStretchOfAUsedGpuIsAFindingWithItsCostAndWhen) {
  // 10 one-second intervals on GPU 0: busy 0..3 s, at 0-4 % from 3 to 7 s, busy again; $0.001 a second.
  std::vector<store::SampleRecord> samples;
  for (int t = 1; t <= 10; ++t) {
    store::SampleRecord s;
    s.t_ms = t * 1000;
    s.gpu_uuid = "GPU-0";
    s.utilization_pct = (t >= 4 && t <= 7) ? (t == 5 ? 4.0 : 0.0) : 90.0;
    s.cost_micros = 1000;
    s.job_present = true;
    samples.push_back(s);
  }
  auto usage = meter::gpu_usage_from_samples(samples);
  ASSERT_EQ(usage.size(), 1u);
  EXPECT_EQ(usage[0].idle_stretch_start_ms, 3000);
  EXPECT_EQ(usage[0].idle_stretch_ms, 4000);
  EXPECT_EQ(usage[0].idle_stretch_intervals, 4);
  EXPECT_EQ(usage[0].idle_stretch_cost_micros, 4000);
  auto r = report::build_run_report(one_gpu_run(10), usage, {}, {}, nullptr);
  const findings::Finding* f = nullptr;
  for (const auto& x : r.findings)
    if (x.kind == "idle_stretch") f = &x;
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->at_stake_ns, 4'000'000'000);
  EXPECT_EQ(f->cost_nano_usd, 4'000'000);
  EXPECT_EQ(f->severity, findings::Severity::high);  // 40 % of the run's cost
  EXPECT_NE(f->summary.find("GPU 0 sat under 5% utilization for 4.0s in one stretch, from 3.0s to 7.0s"),
            std::string::npos)
      << f->summary;
  EXPECT_NE(f->action.find("--max-idle"), std::string::npos);

  // Two idle intervals are not a stretch.
  samples[3].utilization_pct = 50.0;
  samples[4].utilization_pct = 50.0;
  auto short_usage = meter::gpu_usage_from_samples(samples);
  auto r2 = report::build_run_report(one_gpu_run(10), short_usage, {}, {}, nullptr);
  for (const auto& x : r2.findings) EXPECT_NE(x.kind, "idle_stretch");
}

// Start-up on a real H200 (tests/data/gpu_check/README.md): the job moved its weights to the GPU at 5.7 s and
// launched its first kernel at 10.64 s; in between the GPU held its context and did nothing.
std::vector<store::SampleRecord> h200_startup_samples() {
  std::istringstream in(
      test::read_file(test::source_dir() + "/tests/data/gpu_check/h200_startup_samples.csv"));
  std::string line;
  std::getline(in, line);  // header
  std::vector<store::SampleRecord> out;
  while (std::getline(in, line)) {
    std::vector<double> v;
    std::istringstream cells(line);
    for (std::string c; std::getline(cells, c, ',');) v.push_back(std::stod(c));
    store::SampleRecord s;
    s.t_ms = static_cast<std::int64_t>(v.at(0));
    s.gpu_uuid = "GPU-13753d63-db27-4a88-3c5c-d766dd644a7b";
    s.utilization_pct = v.at(1);
    s.memory_used_bytes = static_cast<std::uint64_t>(v.at(2));
    s.power_w = v.at(3);
    s.job_present = v.at(4) != 0;
    s.gpm.sm_active = v.at(5);
    s.gpm.tensor_active = v.at(6);
    s.gpm.fp32_active = v.at(7);
    s.gpm.dram_bw_util = v.at(8);
    out.push_back(s);
  }
  return out;
}

TEST(RunLowUtilizationTest, StartupIsLeftOutOfTheBusyShare) {
  // 20 one-second intervals at $0.001 each on one used GPU: idle with the job's context for `startup` s, then
  // at `util` %.
  auto report = [](int startup, double util) {
    std::vector<store::SampleRecord> samples;
    for (int t = 1; t <= 20; ++t) {
      store::SampleRecord s;
      s.t_ms = t * 1000;
      s.gpu_uuid = "GPU-0";
      s.utilization_pct = t <= startup ? 0.0 : util;
      s.cost_micros = 1000;
      s.job_present = true;
      samples.push_back(s);
    }
    auto usage = meter::gpu_usage_from_samples(samples);
    store::RunRecord run = one_gpu_run(20);
    run.idle_cost_micros = usage[0].idle_cost_micros;
    return report::build_run_report(run, usage, {}, {}, nullptr);
  };
  auto low = [](const report::RunReport& r) -> const findings::Finding* {
    for (const auto& f : r.findings)
      if (f.kind == "low_utilization") return &f;
    return nullptr;
  };
  // 12 s of start-up, then 8 s at 90 %: 36 % over the run, 90 % after start-up; the start-up is its own
  // finding.
  const auto trained = report(12, 90.0);
  ASSERT_TRUE(trained.startup.has_value());
  EXPECT_EQ(trained.startup->ms, 12'000);
  EXPECT_NEAR(*trained.effective_utilization, 0.36, 1e-9);
  EXPECT_EQ(low(trained), nullptr);
  // 2 s of start-up, then 18 s at 30 %: idle after start-up is the finding, with its cost.
  const auto idle = report(2, 30.0);
  const auto* f = low(idle);
  ASSERT_NE(f, nullptr);
  EXPECT_NE(f->summary.find("busy 30% of the time after start-up"), std::string::npos) << f->summary;
  EXPECT_EQ(f->at_stake_ns, 12'600'000'000);  // 70 % of 18 s
  ASSERT_TRUE(f->cost_nano_usd.has_value());
  EXPECT_EQ(*f->cost_nano_usd, 12'600'000);  // 18 intervals × 70 % of $0.001
}

TEST(RunMeterTest, StartupOnH200EndsAtTheFirstComputingIntervalNotAtTheWeightCopy) {
  const auto job = nlohmann::json::parse(
      test::read_file(test::source_dir() + "/tests/data/gpu_check/h200_startup_job.json"));
  const double first_launch_s = job["first_launch_s"].get<double>();
  auto samples = h200_startup_samples();
  ASSERT_GE(samples.size(), 13u);

  // As recorded: the first interval that shows utilization ([11.0 s, 12.0 s): 18 %, SMs 2.2 % active) holds
  // the first kernel (10.64 s) to within one metering interval; the process appeared at 5 s.
  auto usage = meter::gpu_usage_from_samples(samples);
  ASSERT_EQ(usage.size(), 1u);
  ASSERT_TRUE(usage[0].first_busy_ms.has_value());
  EXPECT_EQ(*usage[0].first_busy_ms, 11001);
  EXPECT_LE(std::abs(static_cast<double>(*usage[0].first_busy_ms) / 1000 - first_launch_s), 1.0);
  EXPECT_EQ(usage[0].first_process_ms, 5001);

  // The weight copy (`model.to("cuda")`, between the marks at 5.2 s and 5.7 s) showed up to 10 % utilization
  // in NVML's 0.1 s readings while GPM saw the SMs idle. gpumeter's reading of that interval happened to say
  // 0 %; in an earlier run of the same job it said >= 5 % and start-up ended at the copy, 6 s before the
  // first kernel (docs/validation.md). The interval with the copy's utilization:
  double copy_util = 0;
  for (const auto& r : job["nvml_every_100ms"])
    if (r[0].get<double>() >= 5.0 && r[0].get<double>() <= 6.0)
      copy_util = std::max(copy_util, r[1].get<double>());
  ASSERT_GE(copy_util, meter::kIdleUtilPct);
  ASSERT_EQ(samples[5].t_ms, 6001);
  samples[5].utilization_pct = copy_util;
  usage = meter::gpu_usage_from_samples(samples);
  EXPECT_EQ(*usage[0].first_busy_ms, 11001) << "a copy with idle SMs is not work";

  // Without GPM (GPUs before Hopper) utilization alone decides, and the copy ends start-up: the stated limit.
  for (auto& s : samples) s.gpm = store::GpmPct{};
  usage = meter::gpu_usage_from_samples(samples);
  EXPECT_EQ(*usage[0].first_busy_ms, 5001);
}

TEST(RunMeterTest, AnIntervalWorksWithUtilizationAndWhereGpmMeasuredItActiveSms) {
  store::GpmPct idle_sms;
  idle_sms.sm_active = 0.0;
  store::GpmPct working_sms;
  working_sms.sm_active = 2.2;
  EXPECT_FALSE(meter::interval_did_work(std::nullopt, working_sms));
  EXPECT_FALSE(meter::interval_did_work(4.0, working_sms));
  EXPECT_TRUE(meter::interval_did_work(18.0, working_sms));
  EXPECT_FALSE(meter::interval_did_work(18.0, idle_sms));
  EXPECT_TRUE(meter::interval_did_work(18.0, store::GpmPct{}));  // no GPM: utilization decides
}

}  // namespace
}  // namespace gm
