// `gpumeter plan` end to end: the real binary over the built-in catalog.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <tuple>

#include "support/support.h"

namespace {

using gm::test::run_gpumeter;
using nlohmann::json;

json plan_json(const std::vector<std::string>& args) {
  std::vector<std::string> full = {"plan"};
  full.insert(full.end(), args.begin(), args.end());
  full.push_back("--json");
  auto r = run_gpumeter(full);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return json::parse(r.out);
}

// Options that fit, from offers the catalog did not flag (among the options that fit, flagged offers are
// ranked after the others; options that do not fit come last).
std::vector<json> fitting(const json& doc) {
  std::vector<json> out;
  bool flagged_seen = false;
  for (const auto& o : doc["options"]) {
    if (!o["fits"].get<bool>()) continue;
    if (!o["flags"].empty())
      flagged_seen = true;
    else
      EXPECT_FALSE(flagged_seen) << "unflagged option after a flagged one: " << o["instance"];
    if (o["fits"].get<bool>() && o["flags"].empty()) out.push_back(o);
  }
  return out;
}

TEST(PlanIntegrationTest, FinetuneRanksRealCatalogOffersWithStableKeys) {
  const json doc = plan_json({"--model", "llama-3-8b", "--task", "finetune", "--tokens", "2e9"});
  for (const char* k : {"weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes",
                        "kv_cache_bytes", "overhead_bytes", "total_bytes"})
    ASSERT_TRUE(doc["memory"].contains(k)) << k;
  const json& m = doc["memory"];
  // Mixed-precision AdamW: 16 bytes per parameter; ZeRO's 2 + 2 + 12 (fp32 master weights under optimizer)
  // when sharded, PyTorch autocast's 4 + 4 + 8 without ZeRO.
  const double params = doc["model"]["params"].get<double>();
  EXPECT_NEAR(params, 8.03e9, 0.01e9);
  const bool zero = doc["parallel"]["zero"].get<int>() >= 1;
  const int shards = zero ? doc["parallel"]["dp"].get<int>() : 1;
  EXPECT_NEAR(m["optimizer_bytes"].get<double>(), (zero ? 12.0 : 8.0) * params / shards, 1e6);
  // The total is the peak (the largest phase of a step, its terms listed) plus the overhead.
  EXPECT_NEAR(m["total_bytes"].get<double>(),
              m["peak_bytes"].get<double>() + m["overhead_bytes"].get<double>(), 1.0);
  double terms = 0;
  for (const auto& t : m["peak"]["terms"]) terms += t["bytes"].get<double>();
  EXPECT_NEAR(terms, m["peak_bytes"].get<double>(), 1.0);
  EXPECT_FALSE(m["peak"]["phase"].get<std::string>().empty());
  EXPECT_EQ(doc["attention"], "sdpa");
  // 6·N·D plus the attention term.
  EXPECT_GT(doc["compute_flops"].get<double>(), 6.0 * params * 2e9);
  EXPECT_LT(doc["compute_flops"].get<double>(), 6.0 * params * 2e9 * 1.2);
  for (const char* k : {"mfu", "seq", "batch", "precision", "optimizer", "recompute", "zero",
                        "overhead_fixed_bytes", "fragmentation"}) {
    ASSERT_TRUE(doc["assumptions"].contains(k)) << k;
    EXPECT_FALSE(doc["assumptions"][k]["source"].get<std::string>().empty()) << k;
  }
  EXPECT_EQ(doc["assumptions"]["seq"]["value"], "2048");
  EXPECT_EQ(doc["assumptions"]["mfu"]["value"], "0.40");

  const auto fits = fitting(doc);
  ASSERT_GE(fits.size(), 10u);
  std::set<std::string> providers;
  double prev_cost = 0;
  for (const auto& o : fits) {
    for (const char* k : {"provider", "region", "instance", "gpu", "gpus_per_instance", "instances", "fits",
                          "time_h", "cost_usd", "spot", "usd_per_million_tokens", "score"})
      ASSERT_TRUE(o.contains(k)) << k;
    providers.insert(o["provider"].get<std::string>());
    EXPECT_FALSE(o["region"].get<std::string>().empty());
    EXPECT_FALSE(o["spot"].get<bool>());
    const double cost = o["cost_usd"].get<double>();
    EXPECT_GE(cost, prev_cost) << o["instance"];  // cheapest first
    prev_cost = cost;
    EXPECT_NEAR(o["usd_per_million_tokens"].get<double>(), cost / 2e9 * 1e6, 1e-9);
    EXPECT_GE(o["score"].get<double>(), 0.0);
    EXPECT_LE(o["score"].get<double>(), 1.0);
  }
  EXPECT_TRUE(providers.count("aws"));
  EXPECT_TRUE(providers.count("azure"));
}

TEST(PlanIntegrationTest, FullAdamwOf8BDoesNotFitOne24GBGpuWhileLoraDoes) {
  const json full = plan_json(
      {"--model", "llama-3-8b", "--task", "finetune", "--tokens", "2e9", "--gpu", "L4", "--gpus", "1"});
  ASSERT_EQ(full["verdicts"].size(), 1u);
  EXPECT_FALSE(full["verdicts"][0]["fits"].get<bool>());
  EXPECT_GT(full["memory"]["total_bytes"].get<double>(), 100e9);  // 16 bytes × 8B params alone are 128 GB
  for (const auto& o : full["options"]) EXPECT_FALSE(o["fits"].get<bool>());

  const json lora = plan_json({"--model", "llama-3-8b", "--task", "lora", "--precision", "bf16", "--tokens",
                               "2e9", "--gpu", "L4", "--gpus", "1"});
  ASSERT_EQ(lora["verdicts"].size(), 1u);
  EXPECT_TRUE(lora["verdicts"][0]["fits"].get<bool>());
  EXPECT_LT(lora["memory"]["total_bytes"].get<double>(), 24e9);
  EXPECT_GT(lora["memory"]["weights_bytes"].get<double>(), 16e9);  // frozen bf16 base
  ASSERT_FALSE(lora["options"].empty());
  EXPECT_TRUE(lora["options"][0]["fits"].get<bool>());
  EXPECT_EQ(lora["options"][0]["gpu"], "L4 24GB");

  // Without --gpus, a full fine-tune spreads over enough 24 GB GPUs with ZeRO.
  const json spread =
      plan_json({"--model", "llama-3-8b", "--task", "finetune", "--tokens", "2e9", "--gpu", "L4"});
  ASSERT_TRUE(spread["verdicts"][0]["fits"].get<bool>());
  EXPECT_GT(spread["verdicts"][0]["parallel"]["gpus"].get<int>(), 1);
  EXPECT_GT(spread["verdicts"][0]["parallel"]["zero"].get<int>(), 0);
}

TEST(PlanIntegrationTest, SpotIsCheaperButSlowerAndOptimizeTimeIsFaster) {
  const std::vector<std::string> base = {"--model", "llama-3-8b", "--task", "finetune", "--tokens", "2e9"};
  const json ondemand = plan_json(base);
  auto with = [&](std::initializer_list<std::string> extra) {
    auto a = base;
    a.insert(a.end(), extra);
    return plan_json(a);
  };
  const json spot = with({"--spot"});
  const json fast = with({"--optimize", "time"});

  std::map<std::tuple<std::string, std::string, std::string>, json> by_key;
  for (const auto& o : fitting(ondemand)) by_key[{o["provider"], o["region"], o["instance"]}] = o;
  const auto spot_fits = fitting(spot);
  ASSERT_FALSE(spot_fits.empty());
  int compared = 0;
  for (const auto& o : spot_fits) {
    EXPECT_TRUE(o["spot"].get<bool>());
    ASSERT_TRUE(o["spot_detail"].is_object());
    EXPECT_GT(o["spot_detail"]["checkpoint_interval_s"].get<double>(), 0.0);
    auto it = by_key.find({o["provider"], o["region"], o["instance"]});
    if (it == by_key.end()) continue;
    ++compared;
    // Interruptions, checkpoints and restarts only add time.
    EXPECT_GT(o["time_h"].get<double>(), it->second["time_h"].get<double>()) << o["instance"];
  }
  EXPECT_GT(compared, 5);
  EXPECT_LT(spot_fits.front()["cost_usd"].get<double>(), fitting(ondemand).front()["cost_usd"].get<double>());
  EXPECT_NE(spot_fits.front()["instance"], fitting(ondemand).front()["instance"]);

  const auto fast_fits = fitting(fast);
  const auto cheap_fits = fitting(ondemand);
  ASSERT_FALSE(fast_fits.empty());
  EXPECT_LT(fast_fits.front()["time_h"].get<double>(), cheap_fits.front()["time_h"].get<double>());
  EXPECT_GT(fast_fits.front()["cost_usd"].get<double>(), cheap_fits.front()["cost_usd"].get<double>());
  for (std::size_t i = 1; i < fast_fits.size(); ++i)
    EXPECT_GE(fast_fits[i]["time_h"].get<double>(), fast_fits[i - 1]["time_h"].get<double>());
}

TEST(PlanIntegrationTest, WeightsGiveAScoreBreakdownAndRankByScore) {
  const json doc = plan_json({"--model", "llama-3-8b", "--task", "lora", "--tokens", "2e9", "--weights",
                              "cost=0.3,perf=0.3,memory=0.2,risk=0.1,carbon=0.1"});
  const auto fits = fitting(doc);
  ASSERT_GE(fits.size(), 3u);
  for (std::size_t i = 1; i < fits.size(); ++i)
    EXPECT_GE(fits[i - 1]["score"].get<double>() + 1e-12, fits[i]["score"].get<double>());
  for (const char* k : {"cost", "perf", "memory", "risk", "carbon"})
    EXPECT_TRUE(fits.front()["score_breakdown"].contains(k)) << k;
}

TEST(PlanIntegrationTest, TableHasARecommendation) {
  auto r = run_gpumeter({"plan", "--model", "llama-3-8b", "--task", "lora", "--tokens", "2e9", "--top", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("Recommended: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Assumptions"), std::string::npos);
  EXPECT_NE(r.out.find("us-east-1"), std::string::npos);  // region shown
}

TEST(PlanIntegrationTest, BadInputIsAUsageError) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--model", "llama-3-8x", "--tokens", "1e9"}, "llama-3-8b"},
      {{"--model", "llama-3-8b", "--tokens", "1e9", "--tp", "3"},
       "--tp 3 does not divide the 32 attention heads"},
      {{"--model", "llama-3-8b", "--tokens", "0"}, "--tokens"},
      {{"--model", "llama-3-8b", "--tokens", "-5"}, "--tokens"},
      {{"--model", "llama-3-8b", "--tokens", "1e9", "--batch", "0"}, "--batch"},
      {{"--params", "-7B", "--tokens", "1e9"}, "--params"},
      {{"--model", "llama-3-8b", "--tokens", "1e9", "--weights", "cost=0.5,perf=0.2"}, "sum to 0.7"},
      {{"--model", "llama-3-8b", "--tokens", "1e9", "--task", "pretrain"}, "--task"},
      {{"--model", "llama-3-8b", "--optimize", "time"}, "--optimize time needs --tokens"},
      {{"--model", "llama-3-8b", "--tokens", "1e9", "--dp", "2000000000", "--tp", "8"}, "65536"},
      {{"--model", "llama-3-8b", "--tokens", "1e9", "--mfu", "1.5"}, "--mfu"},
      {{"--model", "llama-3-8b", "--tokens", "1e9", "--gpus", "0"}, "--gpus"},
      {{"--layers", "32", "--hidden", "4096", "--heads", "30", "--tokens", "1e9"},
       "--heads 30 does not divide"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args = {"plan"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    auto r = run_gpumeter(args);
    EXPECT_EQ(r.exit_code, 2) << c.args[1] << ": " << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty());
  }
}

TEST(PlanIntegrationTest, TcoShowsInputsAndBreakEven) {
  auto r = run_gpumeter({"plan", "tco", "--gpu", "H100", "--gpus", "8", "--capex-usd", "300000", "--years",
                         "3", "--cloud-usd-per-gpu-hour", "4", "--ops-usd-per-year", "20000", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json doc = json::parse(r.out);
  EXPECT_EQ(doc["inputs"]["capex_usd"].get<double>(), 300000);
  EXPECT_EQ(doc["inputs"]["gpu_power_w"].get<double>(), 700);  // TDP from the catalog
  ASSERT_TRUE(doc["break_even_utilization"].is_number());
  const double u = doc["break_even_utilization"].get<double>();
  EXPECT_GT(u, 0.0);
  EXPECT_LT(u, 1.0);
  // At break-even, owning costs what renting costs.
  auto at = run_gpumeter({"plan", "tco", "--gpu", "H100", "--gpus", "8", "--capex-usd", "300000", "--years",
                          "3", "--cloud-usd-per-gpu-hour", "4", "--ops-usd-per-year", "20000",
                          "--utilization", std::to_string(u), "--json"});
  ASSERT_EQ(at.exit_code, 0) << at.err;
  const json d2 = json::parse(at.out);
  EXPECT_NEAR(d2["own"]["total_usd"].get<double>(), d2["cloud"]["total_usd"].get<double>(), 1.0);

  auto bad = run_gpumeter({"plan", "tco", "--gpu", "H100", "--capex-usd", "-1"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
}

}  // namespace

namespace {

TEST(PlanIntegrationTest, ModelFileAndExplicitShapeMatchTheBuiltInModel) {
  gm::test::TempDir dir;
  // Llama-3-8B's shape, given as a TOML file and as flags: same parameter count as the table.
  const std::string path =
      dir.write("llama.toml",
                "name = \"my-llama\"\nlayers = 32\nhidden = 4096\nheads = 32\nkv_heads = 8\nffn = 14336\n"
                "vocab = 128256\nseq = 8192\ngated_mlp = true\n");
  const json builtin = plan_json({"--model", "llama-3-8b", "--tokens", "1e9", "--gpu", "H100"});
  const json file = plan_json({"--model-file", path, "--tokens", "1e9", "--gpu", "H100"});
  const json flags = plan_json({"--layers", "32", "--hidden", "4096", "--heads", "32", "--kv-heads", "8",
                                "--ffn", "14336", "--vocab", "128256", "--tokens", "1e9", "--gpu", "H100"});
  EXPECT_EQ(file["model"]["name"], "my-llama");
  EXPECT_NEAR(file["model"]["params"].get<double>(), builtin["model"]["params"].get<double>(), 1.0);
  EXPECT_NEAR(flags["model"]["params"].get<double>(), builtin["model"]["params"].get<double>(), 1.0);
  EXPECT_NEAR(file["memory"]["total_bytes"].get<double>(), builtin["memory"]["total_bytes"].get<double>(),
              1.0);

  const std::string bad = dir.write("bad.toml", "layers = 32\nhidden = 4096\nheads = 30\n");
  auto r = run_gpumeter({"plan", "--model-file", bad, "--tokens", "1e9"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("bad.toml"), std::string::npos) << r.err;
}

}  // namespace
