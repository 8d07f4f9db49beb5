// A trace priced once (issue 36): findings::price_trace prices every figure the renderers show with meter's
// integer pico-dollars and runs the findings; the renderers of `gpumeter trace` and `trace diff` price
// nothing themselves (checked on their sources).
#include "findings/priced_trace.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "meter/meter.h"
#include "report/trace_render.h"
#include "support/support.h"

namespace gm::findings {
namespace {

constexpr MicroUsd kPrice = 2'500'000;  // $2.50/GPU-hour

double usd(std::int64_t ns) {
  return static_cast<double>(meter::gpu_ns_cost_pico_usd(kPrice, ns)) / 1e12;
}

trace::FileAnalysis one_device_file() {
  trace::FileAnalysis f;
  f.file = "/runs/a/rank0.json";
  f.group = "/runs/a";
  f.format = "kineto_json";
  trace::DeviceAnalysis d;
  d.device = "0";
  d.window_ns = 10'000'001;
  d.busy_ns = 6'000'000;
  d.idle_ns = 4'000'001;
  d.compute_ns = 5'000'000;
  d.memory_ns = 1'000'000;
  d.idle_input_ns = 3'000'000;
  d.idle_host_wait_ns = 3'000'000;
  d.idle_other_ns = 1'000'001;
  d.kernel_ns = 6'500'000;
  d.activity_count = 7;
  d.kernels = {{"sgemm", "compute", 4, 4'000'000, 3'999'999, 0},
               {"relu", "compute", 2, 1'500'000, 1'000'001, 0},
               {"Memcpy HtoD (Pageable -> Device)", "memory", 1, 1'000'000, 1'000'000, 0}};
  d.steps = {{"ProfilerStep#1", "", 1, 3'000'000, 3'000'000, 4'000'000},
             {"ProfilerStep#2", "", 1, 3'000'000, 3'000'000, 4'000'001},
             {"(outside steps)", "", 0, 0, 0, 0}};
  d.step_ns.count = 2;
  d.step_ns.mean = 4'000'000.5;
  f.devices.push_back(d);
  return f;
}

TEST(PricedTraceTest, EveryFigureIsPricedOnceWithMetersPicoDollars) {
  const PricedTrace p = price_trace({one_device_file()}, {kPrice, "--price"}, nullptr, 1000);
  ASSERT_EQ(p.costs.size(), 1u);
  ASSERT_EQ(p.costs[0].devices.size(), 1u);
  const DeviceCosts& c = p.costs[0].devices[0];
  EXPECT_EQ(c.window_usd, usd(10'000'001));
  EXPECT_EQ(c.idle_usd, usd(4'000'001));
  EXPECT_EQ(c.idle_input_usd, usd(3'000'000));
  ASSERT_EQ(c.kernels.attributed_usd.size(), 3u);
  EXPECT_EQ(c.kernels.attributed_usd[1], usd(1'000'001));
  // The "(N more)" rows price the rows' time summed, not the sum of rounded prices.
  ASSERT_EQ(c.kernels.rest_usd.size(), 4u);
  EXPECT_EQ(c.kernels.rest_usd[1], usd(2'000'001));
  EXPECT_EQ(c.kernels.rest_usd[3], usd(0));
  // A step's wall time is priced; "(outside steps)" has none.
  EXPECT_EQ(c.steps.step_usd[1], usd(4'000'001));
  EXPECT_FALSE(c.steps.step_usd[2].has_value());
  EXPECT_EQ(c.per_step_usd, meter::gpu_ns_cost_usd(kPrice, 4'000'000.5));
  EXPECT_DOUBLE_EQ(*c.idle_per_1k_steps_usd, usd(4'000'001) / 2 * 1000);
  EXPECT_DOUBLE_EQ(*c.projected_usd, *c.per_step_usd * 1000);
  // The findings come with the costs, priced at the same price (input_bound: 30 % of the window).
  ASSERT_FALSE(c.findings.empty());
  EXPECT_EQ(c.findings.front().kind, "input_bound");
  EXPECT_EQ(c.findings.front().cost_nano_usd, meter::gpu_ns_cost_pico_usd(kPrice, 3'000'000) / 1000);
  EXPECT_EQ(p.totals.devices, 1u);
  EXPECT_EQ(p.totals.window_usd, usd(10'000'001));
  EXPECT_FALSE(p.totals.straggler_ns.has_value());
}

TEST(PricedTraceTest, WithoutAPriceFiguresStayInTimeAndTheFindingsHaveNoDollars) {
  const PricedTrace p = price_trace({one_device_file()}, {}, nullptr, 1000);
  const DeviceCosts& c = p.costs[0].devices[0];
  EXPECT_FALSE(c.window_usd.has_value());
  EXPECT_FALSE(c.per_step_usd.has_value());
  EXPECT_FALSE(c.projected_usd.has_value());
  EXPECT_FALSE(c.kernels.attributed_usd[0].has_value());
  ASSERT_FALSE(c.findings.empty());
  EXPECT_FALSE(c.findings.front().cost_nano_usd.has_value());
  EXPECT_EQ(c.findings.front().at_stake_ns, 3'000'000);
}

TEST(PricedTraceTest, TheRenderersShowThePricedFigures) {
  const PricedTrace p = price_trace({one_device_file()}, {kPrice, "--price"}, nullptr, 1000);
  const std::string json = report::trace_json(p);
  EXPECT_NE(json.find("\"projected_steps\": 1000"), std::string::npos);
  report::TraceRenderOptions o;
  o.top = 1;
  const std::string text = report::trace_text(p, o);
  EXPECT_NE(text.find("(2 more)"), std::string::npos) << text;
  EXPECT_NE(text.find(util::format_usd(usd(2'000'001))), std::string::npos) << text;
}

TEST(PricedTraceTest, DiffRowsArePricedPerStep) {
  trace::TraceDiff d;
  d.per = "step";
  trace::DiffRow r;
  r.kind = "summary";
  r.name = "window";
  r.base_ns = 1'000'000;
  r.new_ns = 1'250'000.4;
  d.summary.push_back(r);
  const PricedDiff p = price_diff(d, {kPrice, "--price"});
  ASSERT_EQ(p.summary.size(), 1u);
  EXPECT_EQ(p.summary[0].base_usd, meter::gpu_ns_cost_usd(kPrice, 1'000'000));
  EXPECT_EQ(p.summary[0].delta_usd, meter::gpu_ns_cost_usd(kPrice, 250'000.4));
  EXPECT_FALSE(price_diff(d, {}).summary[0].new_usd.has_value());
}

std::string read(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The must-show of issue 36: trace costs are computed in one place. The renderers of traces, trace jobs
// and trace diffs and the trace commands neither price nanoseconds nor run the findings.
TEST(PricedTraceTest, TraceCostsAreComputedInOnePlace) {
  const std::filesystem::path src = test::source_dir() + "/src";
  const std::vector<std::string> readers = {"report/trace_render.cpp",      "report/trace_job_render.cpp",
                                            "report/trace_diff_render.cpp", "report/html_trace.cpp",
                                            "report/html_diff.cpp",         "cli/cmd_trace.cpp",
                                            "cli/cmd_trace_diff.cpp",       "cli/cmd_trace_demo.cpp"};
  for (const auto& file : readers) {
    const std::string text = read(src / file);
    ASSERT_FALSE(text.empty()) << file;
    for (const char* pricing : {"gpu_ns_cost", "for_trace_device", "for_trace_host", "analyze_jobs"})
      EXPECT_EQ(text.find(pricing), std::string::npos) << file << " calls " << pricing;
  }
  const std::string priced = read(src / "findings/priced_trace.cpp");
  for (const char* pricing : {"gpu_ns_cost_pico_usd", "for_trace_device", "for_trace_host", "analyze_jobs"})
    EXPECT_NE(priced.find(pricing), std::string::npos) << pricing;
}

}  // namespace
}  // namespace gm::findings
