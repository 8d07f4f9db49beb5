// `gpumeter plan` without --tokens: the fit question (memory and verdict), no time or cost.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "support/support.h"

namespace {

using gm::test::run_gpumeter;
using nlohmann::json;

TEST(PlanFitIntegrationTest, JsonWithoutTokensHasMemoryAndVerdictAndNullTimeAndCost) {
  auto r = run_gpumeter({"plan", "--model", "llama-3-8b", "--task", "finetune", "--gpu", "L4", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json doc = json::parse(r.out);
  EXPECT_TRUE(doc["tokens"].is_null());
  EXPECT_TRUE(doc["compute_flops"].is_null());
  EXPECT_GT(doc["memory"]["total_bytes"].get<double>(), 16 * 8e9 / 8);  // ZeRO-3 over at most 8 GPUs
  ASSERT_EQ(doc["verdicts"].size(), 1u);
  EXPECT_EQ(doc["verdicts"][0]["gpu"], "L4 24GB");
  EXPECT_TRUE(doc["verdicts"][0]["fits"].get<bool>());
  ASSERT_FALSE(doc["options"].empty());
  for (const auto& o : doc["options"]) {
    for (const char* k : {"time_h", "cost_usd", "billed_h", "usd_per_million_tokens", "score", "energy_kwh"})
      EXPECT_TRUE(o[k].is_null()) << k;
    EXPECT_GT(o["usd_per_hour"].get<double>(), 0);
    EXPECT_EQ(o["gpu"], "L4 24GB");
  }
  bool noted = false;
  for (const auto& n : doc["notes"])
    noted = noted || n.get<std::string>().find("no --tokens") != std::string::npos;
  EXPECT_TRUE(noted) << doc["notes"].dump();
  EXPECT_NE(doc["recommendation"].get<std::string>().find("Give --tokens"), std::string::npos);
}

TEST(PlanFitIntegrationTest, TextWithoutTokensSaysGiveTokensInTimeAndCostColumns) {
  auto r = run_gpumeter({"plan", "--model", "llama-3-8b", "--task", "finetune", "--gpu", "L4", "--top", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("no --tokens"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("GPU verdicts"), std::string::npos);
  EXPECT_NE(r.out.find("give --tokens  give --tokens"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Cheapest that fits:"), std::string::npos) << r.out;
  // A model that cannot fit one L4 even sharded still gets its verdict.
  auto big =
      run_gpumeter({"plan", "--model", "llama-3-70b", "--task", "finetune", "--gpu", "L4", "--gpus", "1"});
  ASSERT_EQ(big.exit_code, 0) << big.err;
  EXPECT_NE(big.out.find("Nothing in the catalog fits"), std::string::npos) << big.out;
}

TEST(PlanFitIntegrationTest, TimeObjectiveWithoutTokensIsAUsageError) {
  auto r = run_gpumeter({"plan", "--model", "llama-3-8b", "--optimize", "time"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--optimize time needs --tokens"), std::string::npos) << r.err;
  auto zero = run_gpumeter({"plan", "--model", "llama-3-8b", "--tokens", "0"});
  EXPECT_EQ(zero.exit_code, 2);
  EXPECT_NE(zero.err.find("--tokens"), std::string::npos);
}

}  // namespace
