// Run findings through the real binary on the fake NVML library: a job that never touches the two GPUs it was
// given is told so, with the dollars at stake (docs/findings.md).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "support/support.h"

namespace gm::test {
namespace {

TEST(ReportFindingsIntegrationTest, UnusedGpusAreAFindingWithTheirCostPerRunAndPerMonth) {
  GM_ASSERT_BUILT();
  TempDir dir;
  const auto env = fake_env(source_dir() + "/tests/data/gpu/two_gpus.json", dir.path());
  auto run = run_gpumeter({"run", "--price", "4", "--", "sleep", "2"}, env);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE((run.out + run.err).find("[high] unused_gpus: 2 of 2 allocated GPUs never ran the job"),
            std::string::npos)
      << run.out << run.err;
  auto rep = run_gpumeter({"report", "1", "--json"}, env);
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  const auto j = nlohmann::json::parse(rep.out);
  ASSERT_EQ(j["findings"].size(), 1u) << j["findings"];
  const auto& f = j["findings"][0];
  EXPECT_EQ(f["kind"], "unused_gpus");
  EXPECT_EQ(f["severity"], "high");
  // Every dollar of the run is at stake: the job used neither GPU.
  EXPECT_DOUBLE_EQ(f["cost_usd"].get<double>(), j["unused_gpu_cost_usd"].get<double>());
  EXPECT_DOUBLE_EQ(f["cost_usd"].get<double>(), j["cost_usd"].get<double>());
  // Per month at the billed rate: 2 GPUs × $4/h × 730 h = $5,840 (less the micro-dollar rounding of the run).
  EXPECT_NEAR(f["usd_per_month"].get<double>(), 5840.0, 1.0);
  EXPECT_TRUE(f["usd_per_1k_steps"].is_null());
  EXPECT_EQ(f["evidence"]["gpus_used"], 0);
  EXPECT_NE(f["action"].get<std::string>().find("CPU instance"), std::string::npos);

  // The run page opens with the same finding as a card: severity, what, the dollars, the action.
  auto page = run_gpumeter({"report", "1", "--html", dir.path() + "/run.html"}, env);
  ASSERT_EQ(page.exit_code, 0) << page.err;
  const std::string html = read_file(dir.path() + "/run.html");
  EXPECT_NE(html.find("\"kind\":\"unused_gpus\""), std::string::npos);
  EXPECT_NE(html.find("/month at this rate"), std::string::npos);
  EXPECT_NE(html.find("section', 'finding ' + f.severity"), std::string::npos);
}

}  // namespace
}  // namespace gm::test
