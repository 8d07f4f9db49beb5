// `gpumeter plan --model PATH|NAME` with Hugging Face configs, --attention, the peak's terms in --json, and
// today's models in --list-models: the real binary.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "support/support.h"

namespace {

using gm::test::run_gpumeter;
using nlohmann::json;

std::string config(const char* name) {
  return gm::test::source_dir() + "/tests/data/plan/hf_configs/" + name + ".json";
}

TEST(PlanHfCliTest, ListModelsShowsTodaysModelsWithTheirSource) {
  auto r = run_gpumeter({"plan", "--list-models"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* name :
       {"llama-3.2-1b",    "llama-3.2-3b", "llama-3.3-70b", "qwen3-0.6b",  "qwen3-1.7b",
        "qwen3-4b",        "qwen3-8b",     "qwen3-14b",     "qwen3-32b",   "qwen3-30b-a3b",
        "qwen3-235b-a22b", "gemma-3-1b",   "gemma-3-4b",    "gemma-3-12b", "gemma-3-27b",
        "phi-4",           "gpt-oss-20b",  "gpt-oss-120b",  "deepseek-v3", "mistral-small-3.1-24b"})
    EXPECT_NE(r.out.find(std::string("\n") + name + " "), std::string::npos) << name;
  EXPECT_NE(r.out.find("Hugging Face deepseek-ai/DeepSeek-V3 config.json"), std::string::npos);
  auto j = run_gpumeter({"plan", "--list-models", "--json"});
  ASSERT_EQ(j.exit_code, 0) << j.err;
  bool found = false;
  for (const auto& m : json::parse(j.out))
    if (m["name"] == "qwen3-30b-a3b") {
      found = true;
      EXPECT_EQ(m["experts"], 128);
      EXPECT_EQ(m["head_dim"], 128);
      EXPECT_NE(m["source"].get<std::string>().find("config.json"), std::string::npos);
    }
  EXPECT_TRUE(found);
}

TEST(PlanHfCliTest, ConfigPathAndTableNameGiveTheSamePlanWithThePeakTerms) {
  const std::vector<std::string> job = {"--task",      "train", "--precision", "bf16",        "--batch",
                                        "4",           "--seq", "2048",        "--recompute", "none",
                                        "--attention", "eager", "--gpus",      "1",           "--json"};
  std::vector<std::string> by_path = {"plan", "--model", config("qwen3-0.6b")};
  std::vector<std::string> by_name = {"plan", "--model", "qwen3-0.6b"};
  by_path.insert(by_path.end(), job.begin(), job.end());
  by_name.insert(by_name.end(), job.begin(), job.end());
  auto a = run_gpumeter(by_path), b = run_gpumeter(by_name);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.err;
  const json pa = json::parse(a.out), pb = json::parse(b.out);
  EXPECT_EQ(pa["memory"]["total_bytes"], pb["memory"]["total_bytes"]);
  EXPECT_EQ(pa["memory"]["peak_bytes"], pb["memory"]["peak_bytes"]);
  EXPECT_EQ(pa["attention"], "eager");
  EXPECT_EQ(pa["model"]["family"], "qwen3");
  // Measured on the H200 (tests/data/plan/peak_memory_h200.jsonl): 81,161,367,552 bytes.
  EXPECT_NEAR(pa["memory"]["peak_bytes"].get<double>() / 81161367552.0, 1.0, 0.10);
  EXPECT_EQ(pa["memory"]["peak"]["phase"], "loss backward");
  std::set<std::string> names;
  for (const auto& t : pa["memory"]["peak"]["terms"]) names.insert(t["name"].get<std::string>());
  for (const char* t :
       {"weights", "optimizer states", "activations", "nll_loss gradient", "log-softmax gradient"})
    EXPECT_TRUE(names.count(t)) << t;
  EXPECT_EQ(pa["memory"]["peak"]["phases"].size(), 4u);
}

TEST(PlanHfCliTest, AttentionFlagAndTextReport) {
  auto sdpa = run_gpumeter({"plan", "--model", "smollm2-360m", "--task", "train", "--batch", "4", "--seq",
                            "2048", "--precision", "bf16", "--recompute", "none", "--gpus", "1"});
  ASSERT_EQ(sdpa.exit_code, 0) << sdpa.err;
  EXPECT_NE(sdpa.out.find("attention sdpa"), std::string::npos) << sdpa.out;
  EXPECT_NE(sdpa.out.find("peak "), std::string::npos);
  EXPECT_NE(sdpa.out.find("at the loss backward"), std::string::npos) << sdpa.out;
  auto bad = run_gpumeter({"plan", "--model", "gpt2", "--attention", "paged"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--attention 'paged' is not one of eager, sdpa, flash"), std::string::npos)
      << bad.err;
}

TEST(PlanHfCliTest, BadConfigsAreUsageErrorsNamingTheFileAndKey) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / "gm_plan_hf_cli";
  std::filesystem::create_directories(dir);
  const std::string file = (dir / "broken.json").string();
  std::ofstream(file) << R"({"model_type": "qwen3", "hidden_size": 1024, "num_hidden_layers": 28,
                             "num_attention_heads": 16, "vocab_size": 151936})";
  auto r = run_gpumeter({"plan", "--model", file});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(file + ": missing 'intermediate_size'"), std::string::npos) << r.err;
  auto folder = run_gpumeter({"plan", "--model", dir.string()});
  EXPECT_EQ(folder.exit_code, 2);
  EXPECT_NE(folder.err.find("has no config.json"), std::string::npos) << folder.err;
  auto hub = run_gpumeter({"plan", "--model", "someorg/somemodel"}, {{"HF_HOME", dir.string()}});
  EXPECT_EQ(hub.exit_code, 2);
  EXPECT_NE(hub.err.find("models--someorg--somemodel"), std::string::npos) << hub.err;
  std::filesystem::remove_all(dir);
}

TEST(PlanHfCliTest, HubIdFromTheLocalCache) {
  const auto home = std::filesystem::path(::testing::TempDir()) / "gm_plan_hf_home";
  const auto snap = home / "hub" / "models--Qwen--Qwen3-0.6B" / "snapshots" / "c1899de";
  std::filesystem::create_directories(snap);
  std::filesystem::copy_file(config("qwen3-0.6b"), snap / "config.json",
                             std::filesystem::copy_options::overwrite_existing);
  auto r = run_gpumeter({"plan", "--model", "Qwen/Qwen3-0.6B-Base", "--json"}, {{"HF_HOME", home.string()}});
  // Not cached under that id: a clear error; the cached id plans.
  EXPECT_EQ(r.exit_code, 2);
  std::filesystem::rename(home / "hub" / "models--Qwen--Qwen3-0.6B",
                          home / "hub" / "models--Qwen--Qwen3-0.6B-Base");
  auto ok = run_gpumeter({"plan", "--model", "Qwen/Qwen3-0.6B-Base", "--json"}, {{"HF_HOME", home.string()}});
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  const json p = json::parse(ok.out);
  EXPECT_EQ(p["model"]["name"], "Qwen/Qwen3-0.6B-Base");
  EXPECT_EQ(p["model"]["params"], 596049920.0);
  std::filesystem::remove_all(home);
}

}  // namespace
