// Findings on the shipped ResNet-50 profiler samples (TensorBoard plugin, V100): figures checked by hand
// against the trace's own idle-gap and window figures (docs/findings.md).
#include "findings/findings.h"

#include <gtest/gtest.h>

#include "report/multi.h"
#include "support/support.h"

namespace gm::findings {
namespace {

trace::DeviceAnalysis resnet(const std::string& workers) {
  auto set =
      trace::analyze_inputs({test::shared_dir() + "/traces/kineto_tb_plugin_samples/resnet50_" + workers});
  EXPECT_TRUE(set.ok());
  EXPECT_EQ(set->files.size(), 1u);
  EXPECT_EQ(set->files.front().devices.size(), 1u);
  return set->files.front().devices.front();
}

const Finding* find(const std::vector<Finding>& fs, const std::string& kind) {
  for (const auto& f : fs)
    if (f.kind == kind) return &f;
  return nullptr;
}

TEST(FindingsTest, InputBoundOnNumWorkersZeroAndMuchSmallerWithFourWorkers) {
  const MicroUsd price = 3'000'000;  // $3/GPU-hour
  const auto zero = for_trace_device(resnet("num_workers_0"), price);
  const Finding* input = find(zero, "input_bound");
  ASSERT_NE(input, nullptr);
  EXPECT_EQ(zero.front().kind, "input_bound");  // the largest at stake comes first
  EXPECT_EQ(input->severity, Severity::high);
  // 382.676 ms of 996.477 ms waiting on the host: 38.4 %.
  EXPECT_EQ(input->at_stake_ns, 382'676'000);
  // $3/h × 382.676 ms = $0.000318896(7) → 318 896 nano-dollars (floor of the pico-dollar figure / 1000).
  EXPECT_EQ(input->cost_nano_usd, 318'896);
  // Six ProfilerSteps: $0.0531494 per 1k steps.
  EXPECT_EQ(input->nano_usd_per_1k_steps, 53'149'444);
  // 38.4 % of a GPU at $3/h for 730 h: $841.02 a month.
  ASSERT_TRUE(input->nano_usd_per_month.has_value());
  EXPECT_NEAR(static_cast<double>(*input->nano_usd_per_month) / 1e9, 841.02, 0.01);
  EXPECT_FALSE(input->action.empty());

  const auto four = for_trace_device(resnet("num_workers_4"), price);
  const Finding* input4 = find(four, "input_bound");
  ASSERT_NE(input4, nullptr);  // four workers still leave 21.8 % host wait on this 8-core machine
  EXPECT_LT(*input4->nano_usd_per_month, *input->nano_usd_per_month * 6 / 10);
  EXPECT_LT(input4->severity, input->severity);

  // Pageable copies: 12 "Memcpy HtoD (Pageable -> Device)" per trace.
  const Finding* pageable = find(zero, "pageable_copies");
  ASSERT_NE(pageable, nullptr);
  EXPECT_EQ(std::get<std::int64_t>(pageable->evidence[1].value), 12);
}

TEST(FindingsTest, WithoutAPriceFindingsKeepTheirTimeAndHaveNoDollars) {
  const auto fs = for_trace_device(resnet("num_workers_0"), std::nullopt);
  const Finding* input = find(fs, "input_bound");
  ASSERT_NE(input, nullptr);
  EXPECT_EQ(input->at_stake_ns, 382'676'000);
  EXPECT_FALSE(input->cost_nano_usd.has_value());
  EXPECT_FALSE(input->nano_usd_per_month.has_value());
}

TEST(FindingsTest, LaunchBoundAndExposedCommunicationFromTheirFigures) {
  trace::DeviceAnalysis d;
  d.window_ns = 1'000'000'000;
  d.busy_ns = 500'000'000;
  d.idle_ns = 500'000'000;
  d.idle_other_ns = 450'000'000;
  d.idle_host_wait_ns = 50'000'000;
  d.compute_ns = 380'000'000;
  d.communication_ns = 120'000'000;
  d.overlap_ns = 30'000'000;
  d.activity_count = 100'000;
  d.kernel_ns = 500'000'000;  // 5 µs per kernel
  d.queue_depth = {100'000, 0.8, 0, 1, 2, 3, 0.5};
  d.launch_delay_ns = {100'000, 9000, 4000, 8000, 20000, 50000, 3000};
  const auto fs = for_trace_device(d, 2'000'000);
  const Finding* launch = find(fs, "launch_bound");
  ASSERT_NE(launch, nullptr);
  EXPECT_EQ(launch->at_stake_ns, 450'000'000);
  EXPECT_EQ(launch->severity, Severity::high);
  const Finding* comm = find(fs, "communication_exposed");
  ASSERT_NE(comm, nullptr);
  EXPECT_EQ(comm->at_stake_ns, 120'000'000);
  EXPECT_EQ(comm->severity, Severity::low);
  EXPECT_EQ(find(fs, "input_bound"), nullptr);  // 5 % host wait is under the 10 % threshold
  // A queue that stays full is not launch-bound, whatever the idle time.
  d.queue_depth.p50 = 8;
  EXPECT_EQ(find(for_trace_device(d, 2'000'000), "launch_bound"), nullptr);
}

}  // namespace
}  // namespace gm::findings

namespace gm {
namespace {

TEST(FleetFindingsTest, WasteOfThePeriodNamesTheRunThatWastedMostWithItsMonthlyRate) {
  MultiReport rep;
  rep.since_unix_ms = 0;
  rep.until_unix_ms = 10LL * 86'400'000;  // a 10-day period
  rep.total.runs = 3;
  rep.total.gpu_hours = 100;
  rep.total.cost_micros = 400'000'000;            // $400
  rep.total.idle_cost_micros = 60'000'000;        // $60
  rep.total.unused_gpu_cost_micros = 40'000'000;  // $40: waste $100 = 25 %
  TopRun a;
  a.id = 7;
  a.command = "python train.py";
  a.cost_micros = 300'000'000;
  a.waste_micros = 30'000'000;
  TopRun b;
  b.id = 9;
  b.command = "python eval.py";
  b.cost_micros = 100'000'000;
  b.waste_micros = 70'000'000;
  rep.top_runs = {a, b};
  const auto fs = multi_findings(rep);
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_EQ(fs[0].kind, "fleet_waste");
  EXPECT_EQ(fs[0].severity, findings::Severity::medium);  // 25 %: medium from 15 %, high from 30 %
  EXPECT_EQ(fs[0].cost_nano_usd, 100'000'000'000);
  // $100 in 10 days (240 h) is $304.17 in 730 h.
  EXPECT_EQ(fs[0].nano_usd_per_month, 304'166'666'666);
  EXPECT_NE(fs[0].summary.find("cost $100.00 (25% of $400.00) over 3 run(s)"), std::string::npos)
      << fs[0].summary;
  EXPECT_NE(fs[0].action.find("start with run 9 (python eval.py, $70.00 wasted)"), std::string::npos)
      << fs[0].action;
  // Under 5 % of the cost: nothing to say.
  rep.total.idle_cost_micros = 10'000'000;
  rep.total.unused_gpu_cost_micros = 0;
  EXPECT_TRUE(multi_findings(rep).empty());
}

}  // namespace
}  // namespace gm
