// Ledger fixtures made by the real meter: short jobs under `gpumeter run --price 3600` ($1 per GPU-second) on
// fake-NVML scenarios, then `gpumeter report --by ...` must give exact totals per group.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "store/store.h"
#include "support/support.h"

namespace gm {
namespace {

const char* kScenario = R"({
  "driver_version": "580.95.05",
  "devices": [
    {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-11111111-2222-3333-4444-555555555555",
     "pci_bus_id": "00000000:18:00.0", "memory_total_mib": 81559, "power_limit_w": 700,
     "energy_counter": true, "mig": false,
     "timeline": [
       {"t": 0, "util": 0, "mem_used_mib": 500, "power_w": 100, "temp_c": 35, "processes": []},
       {"t": 1, "util": 50, "mem_used_mib": 20000, "power_w": 400, "temp_c": 60,
        "processes": [{"comm": "sleep", "mem_mib": 19500, "sm_util": 50}]}]},
    {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-66666666-7777-8888-9999-000000000000",
     "pci_bus_id": "00000000:2A:00.0", "memory_total_mib": 81559, "power_limit_w": 700,
     "energy_counter": true, "mig": false,
     "timeline": [{"t": 0, "util": 0, "mem_used_mib": 500, "power_w": 70, "temp_c": 33, "processes": []}]}
  ]
})";

class ReportMeterIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override { GM_ASSERT_BUILT(); }
};

TEST_F(ReportMeterIntegrationTest, TotalsPerGroupFromMeteredRuns) {
  test::TempDir home;
  const std::string scenario = home.write("scenario.json", kScenario);
  auto env = test::fake_env(scenario, home.path());
  struct Job {
    std::string team;
    std::string seconds;
    std::string visible;  // CUDA_VISIBLE_DEVICES: "" = both GPUs allocated
  };
  const std::vector<Job> jobs = {{"nlp", "2", "0"}, {"nlp", "3", "0"}, {"cv", "2", ""}};
  for (const auto& j : jobs) {
    auto e = env;
    if (j.visible.empty()) e["CUDA_VISIBLE_DEVICES"] = "\x01unset";
    else e["CUDA_VISIBLE_DEVICES"] = j.visible;
    auto r = test::run_gpumeter({"run", "--quiet", "--price", "3600", "--label", "team=" + j.team, "--", "sleep", j.seconds}, e,
                                std::nullopt, 60);
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  }
  // Expected figures straight from the ledger's run records: $1 per GPU per billed second, exactly.
  auto ledger = store::Ledger::open(home.path() + "/ledger.db");
  ASSERT_TRUE(ledger.ok()) << ledger.error().message;
  auto runs = (*ledger)->runs();
  ASSERT_TRUE(runs.ok());
  ASSERT_EQ(runs->size(), 3u);
  std::map<std::string, MicroUsd> expected;
  MicroUsd total = 0, unused = 0;
  for (const auto& r : *runs) {
    EXPECT_EQ(r.cost_micros, r.billed_s * static_cast<std::int64_t>(r.gpus_allocated.size()) * 1'000'000)
        << "run " << r.id;
    expected[r.labels.at("team")] += r.cost_micros;
    total += r.cost_micros;
    unused += r.unused_gpu_cost_micros;
  }
  auto rep = test::run_gpumeter({"report", "--since", "1h", "--by", "label:team", "--json"}, env);
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  auto j = nlohmann::json::parse(rep.out);
  EXPECT_EQ(j["total"]["runs"], 3);
  EXPECT_EQ(util::usd_to_micros(j["total"]["cost_usd"].get<double>()), total);
  EXPECT_EQ(util::usd_to_micros(j["total"]["unused_gpu_cost_usd"].get<double>()), unused);
  // The 2-GPU job never used the second GPU: its unused cost is one GPU's billed seconds.
  EXPECT_GT(unused, 0);
  ASSERT_EQ(j["groups"].size(), 2u);
  for (const auto& g : j["groups"])
    EXPECT_EQ(util::usd_to_micros(g["cost_usd"].get<double>()), expected[g["key"].get<std::string>()])
        << g.dump();
}

}  // namespace
}  // namespace gm
