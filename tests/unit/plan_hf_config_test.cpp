// Hugging Face config.json parsing, `--model NAME|PATH` resolution, and the table entries of today's models.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "plan/plan.h"
#include "support/support.h"

namespace gm::plan {
namespace {

namespace fs = std::filesystem;

std::string src(const std::string& rel) {
  return test::source_dir() + "/" + rel;
}

JobSpec training(const ModelSpec& m, Precision p, Attention a) {
  JobSpec job;
  job.model = m;
  job.task = Task::train;
  job.seq = 1024;
  job.batch = 2;
  job.precision = p;
  job.recompute = Recompute::none;
  job.attention = a;
  return job;
}

/// Every figure the plan gives for memory and FLOPs, for one model.
void expect_same_plan(const ModelSpec& a, const ModelSpec& b) {
  EXPECT_DOUBLE_EQ(a.params, b.params);
  EXPECT_DOUBLE_EQ(a.active_params, b.active_params);
  for (Precision p : {Precision::mixed, Precision::bf16, Precision::fp32})
    for (Attention att : {Attention::eager, Attention::sdpa}) {
      const MemoryBreakdown x = estimate_memory(training(a, p, att), Parallelism{});
      const MemoryBreakdown y = estimate_memory(training(b, p, att), Parallelism{});
      EXPECT_DOUBLE_EQ(x.peak_bytes, y.peak_bytes) << precision_name(p) << " " << attention_name(att);
      EXPECT_DOUBLE_EQ(x.activations_bytes, y.activations_bytes);
      EXPECT_DOUBLE_EQ(x.total_bytes, y.total_bytes);
    }
  JobSpec inf = training(a, Precision::bf16, Attention::sdpa);
  inf.task = Task::inference;
  JobSpec inf_b = inf;
  inf_b.model = b;
  EXPECT_DOUBLE_EQ(estimate_memory(inf, Parallelism{}).total_bytes,
                   estimate_memory(inf_b, Parallelism{}).total_bytes);
  EXPECT_DOUBLE_EQ(training_flops_per_token(a, 2048), training_flops_per_token(b, 2048));
}

TEST(PlanHfConfig, TableNameAndConfigGiveTheSameBytes) {
  // Table rows typed by hand (qwen2.5-0.5b, smollm2-360m, gpt2) and rows read from data/hf_configs
  // (qwen3-0.6b) against the config.json a user has.
  for (const char* name : {"qwen2.5-0.5b", "smollm2-360m", "qwen3-0.6b", "gpt2"}) {
    SCOPED_TRACE(name);
    auto table = find_model(name);
    ASSERT_TRUE(table.ok()) << table.error().message;
    auto config = load_hf_config(src("tests/data/plan/hf_configs/") + name + ".json");
    ASSERT_TRUE(config.ok()) << config.error().message;
    EXPECT_EQ(config->family, table->family);
    expect_same_plan(*table, *config);
  }
}

TEST(PlanHfConfig, TodaysModelsAreInTheTableWithTheirSourceAndPublishedSizes) {
  struct Case {
    const char* name;
    double params_b;  // published total (language model)
    double active_b;  // 0: dense
  };
  const Case cases[] = {{"llama-3.2-1b", 1.236, 0},
                        {"llama-3.2-3b", 3.213, 0},
                        {"llama-3.3-70b", 70.55, 0},
                        {"qwen3-0.6b", 0.596, 0},
                        {"qwen3-1.7b", 1.72, 0},
                        {"qwen3-4b", 4.02, 0},
                        {"qwen3-8b", 8.19, 0},
                        {"qwen3-14b", 14.77, 0},
                        {"qwen3-32b", 32.76, 0},
                        {"qwen3-30b-a3b", 30.53, 3.35},
                        {"qwen3-235b-a22b", 235.1, 22.2},
                        {"gemma-3-1b", 1.0, 0},
                        {"gemma-3-4b", 3.88, 0},
                        {"gemma-3-12b", 11.77, 0},
                        {"gemma-3-27b", 27.0, 0},
                        {"phi-4", 14.66, 0},
                        {"gpt-oss-20b", 20.91, 4.19},
                        {"gpt-oss-120b", 116.83, 5.75},
                        {"deepseek-v3", 671.0, 37.6},
                        {"mistral-small-3.1-24b", 23.57, 0}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto m = find_model(c.name);
    ASSERT_TRUE(m.ok()) << m.error().message;
    EXPECT_NEAR(m->params / 1e9, c.params_b, 0.01 * c.params_b);
    if (c.active_b > 0) {
      EXPECT_NEAR(m->active_params / 1e9, c.active_b, 0.02 * c.active_b);
    }
    EXPECT_NE(m->source.find("config.json"), std::string::npos);
    EXPECT_FALSE(m->family.empty());
    // The embedded config is the model's config.json: planning from the file gives the same bytes.
    auto file = load_hf_config(src("data/hf_configs/") + c.name + ".json");
    ASSERT_TRUE(file.ok()) << file.error().message;
    expect_same_plan(*m, *file);
  }
  // GPT-OSS-20B: 20.91B as OpenAI's model card counts it, to the parameter.
  EXPECT_DOUBLE_EQ(find_model("gpt-oss-20b")->params, 20914757184.0);
  EXPECT_DOUBLE_EQ(find_model("deepseek-v3")->params, 671026419200.0);
  EXPECT_EQ(find_model("deepseek-ai/DeepSeek-R1")->name, "deepseek-v3");
}

TEST(PlanHfConfig, EveryModelTypeParses) {
  struct Case {
    const char* json;
    const char* family;
    double params;
  };
  const Case cases[] = {
      {R"({"model_type":"gemma2","hidden_size":2304,"intermediate_size":9216,"num_hidden_layers":26,
           "num_attention_heads":8,"num_key_value_heads":4,"head_dim":256,"vocab_size":256000})",
       "gemma2", 2614341888.0},
      {R"({"model_type":"mixtral","hidden_size":4096,"intermediate_size":14336,"num_hidden_layers":32,
           "num_attention_heads":32,"num_key_value_heads":8,"vocab_size":32000,"num_local_experts":8,
           "num_experts_per_tok":2,"tie_word_embeddings":false})",
       "mixtral", 46702792704.0},
      {R"({"model_type":"qwen2_moe","hidden_size":2048,"intermediate_size":5632,"num_hidden_layers":24,
           "num_attention_heads":16,"num_key_value_heads":16,"vocab_size":151936,"num_experts":60,
           "num_experts_per_tok":4,"moe_intermediate_size":1408,"shared_expert_intermediate_size":5632,
           "decoder_sparse_step":1,"mlp_only_layers":[]})",
       "qwen2_moe", 14315784192.0},
      {R"({"model_type":"gpt2","n_embd":768,"n_layer":12,"n_head":12,"vocab_size":50257,"n_positions":1024,
           "some_future_field":{"x":1}})",
       "gpt2", 124439808.0},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.family);
    auto m = parse_hf_config(c.json, "config.json", "x");
    ASSERT_TRUE(m.ok()) << m.error().message;
    EXPECT_EQ(m->family, c.family);
    EXPECT_DOUBLE_EQ(m->params, c.params);
  }
  // Mixtral from its config is the table's Mixtral.
  auto mixtral = parse_hf_config(cases[1].json, "config.json", "mixtral");
  EXPECT_DOUBLE_EQ(mixtral->active_params, find_model("mixtral-8x7b")->active_params);
  // Gemma 3 keeps its language model in text_config; DeepSeek-V3 is MLA.
  auto gemma = find_model("gemma-3-27b");
  EXPECT_EQ(gemma->family, "gemma3_text");
  EXPECT_EQ(gemma->head_dim(), 128);
  EXPECT_TRUE(gemma->qk_norm);
  EXPECT_EQ(gemma->impl.norms_per_layer, 4);
  auto ds = find_model("deepseek-v3");
  EXPECT_TRUE(ds->mla());
  EXPECT_EQ(ds->head_dim(), 192);
  EXPECT_EQ(ds->value_head_dim(), 128);
  EXPECT_EQ(ds->dense_layers, 3);
  EXPECT_EQ(find_model("phi-4")->family, "phi3");
  EXPECT_TRUE(find_model("phi-4")->impl.fused_qkv);
  EXPECT_EQ(find_model("mistral-small-3.1-24b")->family, "mistral");
}

TEST(PlanHfConfig, MissingOrMistypedKeysAreClearErrorsNamingTheKeyAndFile) {
  struct Case {
    const char* json;
    const char* message;
  };
  const Case cases[] = {
      {R"({"model_type":"llama","hidden_size":2048,"num_hidden_layers":16,"num_attention_heads":32,
           "vocab_size":128256})",
       "my.json: missing 'intermediate_size' (needed for model_type llama)"},
      {R"({"model_type":"deepseek_v3","hidden_size":7168,"intermediate_size":18432,"num_hidden_layers":61,
           "num_attention_heads":128,"vocab_size":129280,"n_routed_experts":256,"num_experts_per_tok":8,
           "moe_intermediate_size":2048})",
       "my.json: missing 'kv_lora_rank'"},
      {R"({"model_type":"llama","hidden_size":"2048"})", "my.json: 'hidden_size' must be a number"},
      {R"({"model_type":"bloom","hidden_size":2048})", "model_type 'bloom' is not one gpumeter plans"},
      {R"({"hidden_size":2048})", "my.json: missing 'model_type'"},
      {R"([1,2])", "my.json: not a JSON object"},
      {R"({"model_type":"llama",)", "my.json: not a JSON object"},
  };
  for (const auto& c : cases) {
    auto m = parse_hf_config(c.json, "my.json", "x");
    ASSERT_FALSE(m.ok()) << c.message;
    EXPECT_EQ(m.error().kind, ErrorKind::usage);
    EXPECT_NE(m.error().message.find(c.message), std::string::npos) << m.error().message;
  }
}

TEST(PlanHfConfig, ResolvesNamesFilesFoldersAndHubIdsInTheLocalCache) {
  const fs::path tmp = fs::path(::testing::TempDir()) / "gm_hf_resolve";
  fs::remove_all(tmp);
  const std::string config = test::read_file(src("tests/data/plan/hf_configs/smollm2-360m.json"));
  auto write = [&](const fs::path& p) {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << config;
  };
  write(tmp / "any-name.txt");
  write(tmp / "SmolLM2-360M" / "config.json");
  const fs::path hub = tmp / "hub" / "models--HuggingFaceTB--SmolLM2-Foo";
  write(hub / "snapshots" / "0123abc" / "config.json");
  fs::create_directories(hub / "refs");
  std::ofstream(hub / "refs" / "main") << "0123abc\n";

  const ModelSearch search{{(tmp / "nowhere").string(), (tmp / "hub").string()}};
  const double want = find_model("smollm2-360m")->params;
  for (const std::string& what : {(tmp / "any-name.txt").string(), (tmp / "SmolLM2-360M").string(),
                                  std::string("HuggingFaceTB/SmolLM2-Foo"), std::string("smollm2-360m")}) {
    SCOPED_TRACE(what);
    auto m = resolve_model(what, search);
    ASSERT_TRUE(m.ok()) << m.error().message;
    EXPECT_DOUBLE_EQ(m->params, want);
  }
  EXPECT_EQ(resolve_model((tmp / "SmolLM2-360M").string(), search)->name, "SmolLM2-360M");
  EXPECT_EQ(resolve_model("HuggingFaceTB/SmolLM2-Foo", search)->name, "HuggingFaceTB/SmolLM2-Foo");
  EXPECT_NE(resolve_model("HuggingFaceTB/SmolLM2-Foo", search)->source.find("local cache"),
            std::string::npos);

  auto missing = resolve_model("org/not-cached", search);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("models--org--not-cached"), std::string::npos)
      << missing.error().message;
  auto empty_folder = resolve_model(tmp.string(), search);
  ASSERT_FALSE(empty_folder.ok());
  EXPECT_NE(empty_folder.error().message.find("has no config.json"), std::string::npos);
  auto unknown = resolve_model("llama-3.2-1", search);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message.find("llama-3.2-1b"), std::string::npos) << unknown.error().message;
  fs::remove_all(tmp);
}

TEST(PlanHfConfig, TrainingFlopsPerTokenArePalmsCount) {
  const ModelSpec gpt2 = find_model("gpt2").value();
  EXPECT_DOUBLE_EQ(training_flops_per_token(gpt2, 1024), 6.0 * gpt2.params + 12.0 * 12 * 768 * 1024);
  // Qwen3's attention is 16 heads × 128 = 2048 wide on a 1024-wide model.
  const ModelSpec q = find_model("qwen3-0.6b").value();
  EXPECT_DOUBLE_EQ(training_flops_per_token(q, 1024), 6.0 * q.params + 12.0 * 28 * 2048 * 1024);
  // MoE: the active parameters.
  const ModelSpec moe = find_model("qwen3-30b-a3b").value();
  EXPECT_LT(training_flops_per_token(moe, 1), 6.0 * moe.params / 5);
  JobSpec job = training(gpt2, Precision::bf16, Attention::sdpa);
  job.tokens = 1e9;
  EXPECT_NEAR(estimate_compute(job).model_flops, training_flops_per_token(gpt2, 1024) * 1e9, 1e3);
}

}  // namespace
}  // namespace gm::plan
