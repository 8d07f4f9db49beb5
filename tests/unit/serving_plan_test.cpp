// The plan's predicted $/1M generated tokens beside a served run's measured figures: the served model name
// matched to the plan's table, the run's GPUs and price, the best batch that fits.
#include <gtest/gtest.h>

#include "catalog/catalog.h"
#include "plan/plan.h"
#include "report/kpi.h"

namespace gm {
namespace {

TEST(ServingPlan, ServedModelNamesMatchThePlanTable) {
  const std::pair<const char*, const char*> cases[] = {
      {"meta-llama/Meta-Llama-3-8B-Instruct", "llama-3-8b"},
      {"meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"},
      {"meta-llama/Llama-2-7b-chat-hf", "llama-2-7b"},
      {"mistralai/Mistral-7B-Instruct-v0.3", "mistral-7b"},
      {"Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b"},
      {"llama-3-70b", "llama-3-70b"},
      {"meta-llama/Llama-3.3-70B-Instruct", "llama-3.3-70b"},  // in the table since issue 39
  };
  for (const auto& [served, name] : cases) {
    auto m = plan::find_served_model(served);
    ASSERT_TRUE(m.has_value()) << served;
    EXPECT_EQ(m->name, name) << served;
  }
  EXPECT_FALSE(plan::find_served_model("standin-llama").has_value());
  EXPECT_FALSE(plan::find_served_model("").has_value());
  EXPECT_FALSE(plan::find_served_model("meta-llama/Llama-4-Scout-17B-16E-Instruct").has_value());
}

store::RunRecord served_run(int gpus) {
  store::RunRecord run;
  run.gpu_model = "H100 SXM 80GB";
  for (int i = 0; i < gpus; ++i) run.gpus_allocated.push_back("GPU-" + std::to_string(i));
  run.price_micros_per_gpu_hour = 2'490'000;
  return run;
}

report::ServingKpis kpis(const std::string& model) {
  report::ServingKpis k;
  k.models = {model};
  k.requests = 1000;
  k.prompt_tokens = 512'000;
  k.generated_tokens = 256'000;
  return k;
}

TEST(ServingPlan, PredictionIsThePlansCheapestFittingBatchOnTheRunsGpusAtItsPrice) {
  auto catalog = catalog::Catalog::builtin();
  ASSERT_TRUE(catalog.ok());
  auto k = kpis("meta-llama/Meta-Llama-3-8B-Instruct");
  report::add_plan_prediction(k, served_run(1), *catalog);
  ASSERT_TRUE(k.plan_usd_per_1m_generated_tokens.has_value()) << k.plan_note;
  EXPECT_EQ(k.plan_model, "llama-3-8b");
  ASSERT_TRUE(k.plan_batch.has_value());
  EXPECT_GT(*k.plan_batch, 1);  // an 8B model on an 80 GB GPU serves many sequences at once

  // The same figure straight from the plan at that batch: 1M generated tokens, 512-token prompts and
  // 256-token answers (the run's means), one H100 at $2.49/h billed per second.
  plan::OfferContext ctx;
  ctx.offer.provider = "this run";
  ctx.offer.instance = "its GPUs";
  ctx.offer.gpu = "H100 SXM 80GB";
  ctx.offer.gpu_count = 1;
  ctx.offer.ondemand_usd_per_hour = 2.49;
  ctx.gpu = *catalog->find_gpu("H100 SXM 80GB");
  ctx.billing.provider = "this run";
  auto one_batch = [&](int batch) {
    plan::PlanRequest req;
    req.job.model = *plan::find_model("llama-3-8b");
    req.job.task = plan::Task::inference;
    req.job.tokens = 1e6;
    req.job.prompt_tokens = 512;
    req.job.seq = 768;
    req.job.batch = batch;
    req.job = plan::resolve_job_defaults(req.job, true, false, false);
    req.gpus = 1;
    req.gpu = "H100 SXM 80GB";
    auto r = plan::make_plan(req, {ctx});
    EXPECT_TRUE(r.ok());
    return r->options.at(0).usd_per_million_tokens.value();
  };
  EXPECT_DOUBLE_EQ(*k.plan_usd_per_1m_generated_tokens, one_batch(*k.plan_batch));
  EXPECT_LT(*k.plan_usd_per_1m_generated_tokens, one_batch(1));  // saturation is cheaper than one at a time
  // The worked example of docs/inference.md.
  EXPECT_EQ(*k.plan_batch, 256);
  EXPECT_NEAR(*k.plan_usd_per_1m_generated_tokens, 0.0906, 0.00005);
}

TEST(ServingPlan, NoPredictionSaysWhy) {
  auto catalog = catalog::Catalog::builtin();
  ASSERT_TRUE(catalog.ok());
  auto unknown = kpis("standin-llama");
  report::add_plan_prediction(unknown, served_run(1), *catalog);
  EXPECT_FALSE(unknown.plan_usd_per_1m_generated_tokens.has_value());
  EXPECT_EQ(unknown.plan_note,
            "model 'standin-llama' is not in the plan's model table (gpumeter plan --help)");
  auto two = kpis("llama-3-8b");
  two.models.push_back("llama-3-70b");
  report::add_plan_prediction(two, served_run(1), *catalog);
  EXPECT_EQ(two.plan_note, "2 models served: the plan predicts one model at a time");
  auto big = kpis("meta-llama/Llama-3.1-405B");
  report::add_plan_prediction(big, served_run(1), *catalog);
  EXPECT_FALSE(big.plan_usd_per_1m_generated_tokens.has_value());
  EXPECT_NE(big.plan_note.find("does not fit"), std::string::npos) << big.plan_note;
}

}  // namespace
}  // namespace gm
