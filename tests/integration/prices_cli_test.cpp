#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "support/support.h"

namespace gm::test {
namespace {

TEST(PricesIntegrationTest, H100x8JsonCheapestFirstWithSourceAndDate) {
  auto r = run_gpumeter({"prices", "H100:8", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_GE(j["offers"].size(), 3u);
  double prev = 0;
  for (const auto& o : j["offers"]) {
    EXPECT_EQ(o["gpu_count"], 8);
    EXPECT_TRUE(o["gpu"].get<std::string>().rfind("H100", 0) == 0);
    EXPECT_FALSE(o["source"].get<std::string>().empty());
    EXPECT_EQ(o["date"].get<std::string>().size(), 10u);
    const double p = o["usd_per_gpu_hour"];
    EXPECT_GE(p, prev);
    prev = p;
    for (const char* k : {"provider", "region", "instance", "ondemand_usd_per_hour", "spot_usd_per_hour", "flags"})
      EXPECT_TRUE(o.contains(k)) << k;
  }
  bool p5 = false;
  for (const auto& o : j["offers"]) p5 = p5 || o["instance"] == "p5.48xlarge";
  EXPECT_TRUE(p5);
}

TEST(PricesIntegrationTest, SpotOrdersBySpotAndFlagsAreCarried) {
  auto r = run_gpumeter({"prices", "--spot", "--all-regions", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  double prev = 0;
  bool flagged = false;
  for (const auto& o : j["offers"]) {
    ASSERT_FALSE(o["spot_usd_per_hour"].is_null());
    for (const auto& f : o["flags"]) flagged = flagged || f == "spot_above_ondemand";
    if (o["usd_per_gpu_hour"].is_null()) {  // GPU count unknown: listed last, flagged
      prev = 1e18;
      continue;
    }
    EXPECT_LT(prev, 1e18) << "priced rows come before rows without a per-GPU price";
    const double p = o["usd_per_gpu_hour"];
    EXPECT_GE(p, prev);
    prev = p;
  }
  EXPECT_TRUE(flagged);
}

TEST(PricesIntegrationTest, UnknownGpuSuggestsCloseNames) {
  auto r = run_gpumeter({"prices", "H1000"});
  EXPECT_EQ(r.exit_code, 4);
  EXPECT_NE(r.err.find("unknown GPU 'H1000'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("H100"), std::string::npos) << r.err;
}

TEST(PricesIntegrationTest, BadOverrideRowNamesFileAndLine) {
  TempDir d;
  const auto f = d.write("mine.csv", "provider,region,instance,gpu,gpu_count,ondemand_usd_per_hour\naws,x,y,H100,8,oops\n");
  auto r = run_gpumeter({"prices", "--catalog", f});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("mine.csv:2"), std::string::npos) << r.err;
  auto u = run_gpumeter({"prices", "--bogus"});
  EXPECT_EQ(u.exit_code, 2);
  EXPECT_NE(u.err.find("--bogus"), std::string::npos) << u.err;
}

TEST(PricesIntegrationTest, OverrideRowsAppearMarked) {
  TempDir d;
  const auto f = d.write("mine.csv",
                         "provider,region,instance,gpu,gpu_count,ondemand_usd_per_hour,spot_usd_per_hour,source,date\n"
                         "onprem,dc1,rack7,H100,8,16.0,,finance,2026-10-01\n");
  auto r = run_gpumeter({"prices", "H100:8", "--catalog", f, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["offers"][0]["instance"], "rack7");
  EXPECT_DOUBLE_EQ(j["offers"][0]["usd_per_gpu_hour"].get<double>(), 2.0);
}

}  // namespace
}  // namespace gm::test
