// Planner math against published figures: ZeRO, Korthikanti, KV cache, 6·N·D, Young/Daly.
#include "plan/plan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "cli/plan_demo.h"

namespace gm::plan {
namespace {

TEST(PlanMemory, ZeroModelStatesMatchThePaper) {
  // Rajbhandari et al. 2020, Figure 1: 7.5B parameters, 64 GPUs, mixed-precision Adam (K = 12).
  const StateBytes k = state_bytes(Precision::mixed, Optimizer::adamw);
  EXPECT_DOUBLE_EQ(k.weights, 2);
  EXPECT_DOUBLE_EQ(k.gradients, 2);
  EXPECT_DOUBLE_EQ(k.optimizer, 12);
  const double expected_gb[4] = {120.0, 31.4, 16.6, 1.9};
  for (int stage = 0; stage <= 3; ++stage) {
    const StateBytes s = zero_model_states(7.5e9, k, stage, 64);
    const double gb = (s.weights + s.gradients + s.optimizer) / 1e9;
    EXPECT_NEAR(gb, expected_gb[stage], 0.05) << "stage " << stage;
  }
}

TEST(PlanMemory, KorthikantiPerLayerActivationsGpt3) {
  // Korthikanti et al. 2022, Table 2 / Figure 7: GPT-3 175B, s=2048, b=1, h=12288, a=96, t=8.
  const double s = 2048, b = 1, h = 12288, a = 96;
  auto gb = [&](int t, bool sp, Recompute r) {
    return activation_bytes_per_layer(s, b, h, a, t, sp, r) / 1e9;
  };
  EXPECT_NEAR(gb(1, false, Recompute::none), 2.869, 0.0005);
  EXPECT_NEAR(gb(8, false, Recompute::none), 0.579, 0.0005);
  EXPECT_NEAR(gb(8, true, Recompute::none), 0.359, 0.0005);
  EXPECT_NEAR(gb(8, false, Recompute::selective), 0.327, 0.0005);
  EXPECT_NEAR(gb(8, true, Recompute::selective), 0.107, 0.0005);
  EXPECT_NEAR(gb(8, false, Recompute::full), 0.050, 0.0005);
}

TEST(PlanMemory, KvCachePerTokenLlama) {
  auto l2 = find_model("llama-2-7b");
  auto l3 = find_model("llama-3-8b");
  ASSERT_TRUE(l2.ok());
  ASSERT_TRUE(l3.ok());
  EXPECT_DOUBLE_EQ(kv_cache_bytes_per_token(*l2, 2), 512.0 * 1024);
  EXPECT_DOUBLE_EQ(kv_cache_bytes_per_token(*l3, 2), 128.0 * 1024);
}

TEST(PlanCompute, SevenBillionOnOneTrillionTokens) {
  // 6 · 7e9 · 1e12 on 64 H100 SXM (989.5 dense BF16 TFLOPS) at 40 % MFU.
  const double flops = dense_training_flops(7e9, 1e12);
  EXPECT_DOUBLE_EQ(flops, 4.2e22);
  const double hours = compute_time_s(flops, 64, 989.5, 0.40) / 3600.0;
  EXPECT_NEAR(hours, 460.6, 0.1);
  // The same with the catalog's H100 SXM dense BF16 figure.
  auto catalog = catalog::Catalog::builtin();
  ASSERT_TRUE(catalog.ok()) << catalog.error().message;
  const catalog::GpuSpec* h100 = catalog->find_gpu("H100 SXM 80GB");
  ASSERT_NE(h100, nullptr);
  auto peak = peak_tflops(*h100, Precision::mixed);
  ASSERT_TRUE(peak.has_value());
  EXPECT_NEAR(compute_time_s(flops, 64, *peak, 0.40) / 3600.0, 460.6, 0.5);
}

TEST(PlanSpot, YoungAndDaly) {
  EXPECT_NEAR(young_interval_s(300, 86400) / 60.0, 120.0, 1e-9);
  EXPECT_NEAR(daly_interval_s(300, 86400) / 60.0, 116.69, 0.005);
  // Checkpoints longer than twice the MTBI: checkpoint every M.
  EXPECT_DOUBLE_EQ(daly_interval_s(1000, 400), 400);
}

TEST(PlanSpot, ExpectationAddsCheckpointsRestartsAndRedoneWork) {
  SpotInputs in;
  in.work_s = 100 * 3600.0;
  in.interruptions_per_hour = 1.0 / 24.0;
  in.checkpoint_s = 300;
  in.restart_s = 600;
  const SpotOutcome o = expected_spot(in);
  ASSERT_TRUE(o.feasible);
  const double tau = daly_interval_s(300, 86400);
  EXPECT_NEAR(o.interval_s, tau, 1e-9);
  const double expect = (in.work_s * (1 + 300 / tau)) / (1 - (600 + (tau + 300) / 2) / 86400);
  EXPECT_NEAR(o.wall_s, expect, 1e-6);
  EXPECT_NEAR(o.expected_interruptions, o.wall_s / 86400, 1e-9);
  EXPECT_NEAR(o.checkpoint_overhead_s + o.restart_overhead_s + o.redone_s + in.work_s, o.wall_s, 1e-3);
  EXPECT_GT(o.wall_s, in.work_s);

  // A notice long enough to write the checkpoint: nothing redone beyond that write.
  in.notice_s = 600;
  const SpotOutcome n = expected_spot(in);
  EXPECT_TRUE(n.checkpoint_on_notice);
  EXPECT_LT(n.wall_s, o.wall_s);

  // Interruptions faster than a restart: infeasible, never a made-up number.
  in.interruptions_per_hour = 10;
  EXPECT_FALSE(expected_spot(in).feasible);

  in.interruptions_per_hour = 0;
  EXPECT_DOUBLE_EQ(expected_spot(in).wall_s, in.work_s);
}

TEST(PlanModels, TableHasRealArchitecturesAndCountsMatchTheShape) {
  const auto& models = builtin_models();
  EXPECT_GE(models.size(), 26u);
  for (const auto& m : models) {
    SCOPED_TRACE(m.name);
    EXPECT_TRUE(validate_model(m).ok());
    if (m.arch == Arch::decoder && m.has_transformer_shape()) {
      // Exact: Llama/Qwen/Mistral with RMSNorm, GPT-2 with learned positions, biases and tied embeddings.
      EXPECT_DOUBLE_EQ(params_from_shape(m), m.params);
    }
  }
  auto mixtral = find_model("mixtral-8x7b");
  ASSERT_TRUE(mixtral.ok());
  EXPECT_NEAR(mixtral->params / 1e9, 46.7, 0.05);
  EXPECT_NEAR(mixtral->active_params / 1e9, 12.9, 0.05);
  EXPECT_DOUBLE_EQ(active_params_from_shape(*mixtral), mixtral->active_params);
  auto l8 = find_model("Meta-Llama/Meta-Llama-3-8B");
  ASSERT_TRUE(l8.ok());
  EXPECT_EQ(l8->name, "llama-3-8b");
}

TEST(PlanModels, UnknownModelSuggestsCloseNames) {
  auto r = find_model("llama-3-8");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, ErrorKind::usage);
  EXPECT_NE(r.error().message.find("llama-3-8b"), std::string::npos) << r.error().message;
}

TEST(PlanModels, TomlModelFile) {
  auto m = parse_model_toml(
      "name = \"tiny\"\nlayers = 4\nhidden = 256\nheads = 4\nkv_heads = 2\nffn = 1024\nvocab = 1000\nseq = "
      "512\n"
      "gated_mlp = true\n",
      "tiny.toml");
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->layers, 4);
  EXPECT_DOUBLE_EQ(m->params, params_from_shape(*m));
  EXPECT_GT(m->params, 0);

  auto bad = parse_model_toml("layers = 4\nhidden = 250\nheads = 4\nffn = 10\nbogus = 1\n", "bad.toml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("bad.toml:5"), std::string::npos) << bad.error().message;
  auto neg = parse_model_toml("params = -5\n", "neg.toml");
  ASSERT_FALSE(neg.ok());
  EXPECT_NE(neg.error().message.find("non-negative"), std::string::npos);
  auto heads = parse_model_toml("layers = 2\nhidden = 250\nheads = 4\nffn = 10\n", "h.toml");
  ASSERT_FALSE(heads.ok());
  EXPECT_NE(heads.error().message.find("divide"), std::string::npos);
  auto syntax = parse_model_toml("layers = = 2\n", "s.toml");
  ASSERT_FALSE(syntax.ok());
  EXPECT_NE(syntax.error().message.find("s.toml:1"), std::string::npos);
}

TEST(PlanMemory, LoraAdapterCountMatchesPeft) {
  // PEFT reports 41,943,040 trainable parameters for r=16 on all linear layers of Llama-3-8B.
  auto m = find_model("llama-3-8b");
  ASSERT_TRUE(m.ok());
  EXPECT_DOUBLE_EQ(lora_params(*m, 16), 41943040.0);
}

JobSpec job_for(const char* model, Task task) {
  JobSpec j;
  j.model = find_model(model).value();
  j.task = task;
  j.tokens = 1e9;
  return resolve_job_defaults(j, false, false, false);
}

TEST(PlanMemory, FullFinetuneOf8BNeedsFarMoreThan24GBWhileLoraFits) {
  JobSpec full = job_for("llama-3-8b", Task::finetune);
  const MemoryBreakdown f = estimate_memory(full, Parallelism{});
  // 16 bytes per parameter of model states alone. Without ZeRO, mixed precision is PyTorch autocast: fp32
  // weights (4), fp32 gradients (4), AdamW's two fp32 states (8); the bf16 copies autocast makes (2) live
  // through forward and backward. (Before the peak model: ZeRO's 2 + 2 + 12 split for every stage.)
  EXPECT_NEAR(f.weights_bytes + f.gradients_bytes + f.optimizer_bytes, 16 * 8030261248.0, 1);
  EXPECT_NEAR(f.optimizer_bytes, 8 * 8030261248.0, 1);
  EXPECT_NEAR(f.weight_copies_bytes, 2 * (8030261248.0 - 128256.0 * 4096), 1);
  // The optimizer step peaks: weights, gradients, states and foreach AdamW's fp32 temporary (20 bytes/param).
  EXPECT_EQ(f.peak.phase, "optimizer step");
  EXPECT_NEAR(f.peak_bytes, 20 * 8030261248.0, 1);
  EXPECT_GT(f.total_bytes, 24e9);

  JobSpec lora = job_for("llama-3-8b", Task::lora);
  EXPECT_EQ(lora.precision, Precision::bf16);
  const MemoryBreakdown l = estimate_memory(lora, Parallelism{});
  EXPECT_NEAR(l.weights_bytes, 2 * 8030261248.0 + 4 * 41943040.0, 1);
  EXPECT_NEAR(l.gradients_bytes, 4 * 41943040.0, 1);
  EXPECT_NEAR(l.optimizer_bytes, 8 * 41943040.0, 1);
  EXPECT_LT(l.total_bytes, 24e9);
  // The peak is the largest phase, not the sum of every term: LoRA's is the backward of the loss, with the
  // log-softmax's and nll_loss's gradients beside the activations.
  EXPECT_DOUBLE_EQ(l.total_bytes, l.peak_bytes + l.overhead_bytes);
  EXPECT_EQ(l.peak.phase, "loss backward");
  EXPECT_DOUBLE_EQ(l.peak_bytes, l.weights_bytes + l.optimizer_bytes + l.activations_bytes +
                                     8.0 * lora.seq * lora.batch * 128256);

  JobSpec q = lora;
  q.qlora = true;
  EXPECT_LT(estimate_memory(q, Parallelism{}).weights_bytes, 0.3 * l.weights_bytes);
}

TEST(PlanMemory, ShardingAndParallelismReduceMemoryPerGpu) {
  JobSpec job = job_for("llama-2-13b", Task::train);
  Parallelism one;
  Parallelism z3;
  z3.dp = 8;
  z3.zero = 3;
  Parallelism tp;
  tp.tp = 4;
  tp.sp = true;
  const MemoryBreakdown a = estimate_memory(job, one), b = estimate_memory(job, z3),
                        c = estimate_memory(job, tp);
  // Mixed precision splits the 16 bytes as PyTorch autocast (4 + 4 + 8) without ZeRO and as ZeRO (2 + 2 + 12)
  // with it: the states as a whole are sharded 8 ways.
  EXPECT_NEAR(b.weights_bytes + b.gradients_bytes + b.optimizer_bytes,
              (a.weights_bytes + a.gradients_bytes + a.optimizer_bytes) / 8, 1);
  EXPECT_NEAR(b.optimizer_bytes, 12.0 * job.model.params / 8, 1);
  EXPECT_DOUBLE_EQ(b.activations_bytes, a.activations_bytes);  // ZeRO does not shard activations
  EXPECT_NEAR(c.weights_bytes, a.weights_bytes / 4, 1);
  EXPECT_LT(c.activations_bytes, a.activations_bytes / 3);
  job.recompute = Recompute::full;
  EXPECT_LT(estimate_memory(job, one).activations_bytes, a.activations_bytes / 5);
}

TEST(PlanMemory, InferenceKvCacheScalesWithBatchAndContext) {
  JobSpec job = job_for("llama-2-7b", Task::inference);
  job.seq = 4096;
  job.batch = 8;
  const MemoryBreakdown m = estimate_memory(job, Parallelism{});
  EXPECT_DOUBLE_EQ(m.kv_cache_bytes, 512.0 * 1024 * 4096 * 8);
  EXPECT_DOUBLE_EQ(m.gradients_bytes, 0);
  EXPECT_DOUBLE_EQ(m.optimizer_bytes, 0);
  EXPECT_NEAR(m.weights_bytes, 2 * 6738415616.0, 1);
}

TEST(PlanCompute, TrainingAddsAttentionAndRecompute) {
  JobSpec job = job_for("llama-3-8b", Task::train);
  job.tokens = 1e9;
  const ComputeEstimate c = estimate_compute(job);
  EXPECT_DOUBLE_EQ(c.attention_flops, 12.0 * 32 * 4096 * 2048 * 1e9);
  EXPECT_DOUBLE_EQ(c.model_flops, 6.0 * 8030261248.0 * 1e9 + c.attention_flops);
  job.recompute = Recompute::full;
  EXPECT_DOUBLE_EQ(estimate_compute(job).hardware_flops,
                   c.model_flops + 2.0 * 8030261248.0 * 1e9 + c.attention_flops / 3);
  // MoE: only the active parameters count.
  JobSpec moe = job_for("mixtral-8x7b", Task::train);
  EXPECT_NEAR(estimate_compute(moe).model_flops - estimate_compute(moe).attention_flops,
              6.0 * moe.model.active_params * *moe.tokens, 1e6);
}

TEST(PlanCompute, InferenceDecodeIsBandwidthBound) {
  JobSpec job = job_for("llama-2-7b", Task::inference);
  job.tokens = 1e6;
  job.batch = 1;
  catalog::GpuSpec h100;
  h100.id = "H100";
  h100.bf16_dense_tflops = 989.5;
  h100.mem_bw_gbps = 3350;
  const ComputeEstimate c = estimate_compute(job);
  EXPECT_DOUBLE_EQ(c.decode_flops, 2.0 * 6738415616.0 * 1e6);
  const MemoryBreakdown m = estimate_memory(job, Parallelism{});
  const TimeEstimate t = estimate_time(job, c, m, Parallelism{}, h100, 0.5, 0.7);
  EXPECT_EQ(t.bound, "memory bandwidth");
  // Every generated token reads the 13.5 GB of weights at least once.
  EXPECT_GT(t.decode_s, 1e6 * m.weights_bytes / (3350e9 * 0.7) * 0.99);
}

TEST(PlanDefaults, MfuByTaskAndScale) {
  EXPECT_DOUBLE_EQ(default_mfu(job_for("llama-3-8b", Task::train)).value, 0.40);
  EXPECT_DOUBLE_EQ(default_mfu(job_for("llama-3.1-405b", Task::train)).value, 0.38);
  EXPECT_DOUBLE_EQ(default_mfu(job_for("gpt2", Task::train)).value, 0.30);
  EXPECT_DOUBLE_EQ(default_mfu(job_for("llama-3-8b", Task::lora)).value, 0.30);
  EXPECT_FALSE(default_mfu(job_for("llama-3-8b", Task::inference)).reason.empty());
}

TEST(PlanTco, BreakEvenUtilization) {
  meter::TcoInput in;
  in.gpus = 8;
  in.years = 3;
  in.capex_usd = 250000;
  in.gpu_power_w = 700;
  in.host_power_w = 0;
  in.idle_power_fraction = 0;
  in.pue = 1.5;
  in.usd_per_kwh = 0.10;
  in.ops_usd_per_year = 10000;
  in.utilization = 0.5;
  in.cloud_usd_per_gpu_hour = 4.0;
  auto r = meter::compute_tco(in);
  ASSERT_TRUE(r.ok()) << r.error().message;
  const double hours = 3 * 8760.0;
  EXPECT_DOUBLE_EQ(r->hours, hours);
  EXPECT_NEAR(r->cloud_total_usd, 8 * hours * 0.5 * 4.0, 1e-6);
  const double kwh = 8 * 0.7 * hours * 0.5 * 1.5;
  EXPECT_NEAR(r->own_total_usd, 250000 + 30000 + kwh * 0.10, 1e-6);
  ASSERT_TRUE(r->break_even_utilization);
  const double u = *r->break_even_utilization;
  // At u*, both sides cost the same.
  const double own_u = 250000 + 30000 + 8 * 0.7 * hours * u * 1.5 * 0.10;
  EXPECT_NEAR(own_u, 8 * hours * u * 4.0, 1e-3);

  in.cloud_usd_per_gpu_hour = 0.5;  // cloud cheaper even at full use
  EXPECT_FALSE(meter::compute_tco(in)->break_even_utilization.has_value());
  in.utilization = 0;
  EXPECT_EQ(meter::compute_tco(in).error().kind, ErrorKind::usage);
}

TEST(PlanScore, WeightsMustSumToOne) {
  auto w = parse_weights("cost=0.3,perf=0.3,memory=0.2,risk=0.1,carbon=0.1");
  ASSERT_TRUE(w.ok());
  EXPECT_DOUBLE_EQ(w->memory, 0.2);
  EXPECT_FALSE(parse_weights("cost=0.5,perf=0.4").ok());
  EXPECT_NE(parse_weights("cost=0.5,perf=0.4").error().message.find("sum to 0.9"), std::string::npos);
  EXPECT_FALSE(parse_weights("cost=1,speed=0").ok());
  EXPECT_FALSE(parse_weights("cost=-1,perf=2").ok());
  EXPECT_FALSE(parse_weights("cost=0.5,cost=0.5").ok());
  EXPECT_TRUE(parse_weights("cost=1").ok());
}

}  // namespace
}  // namespace gm::plan

namespace gm::cli {
namespace {

TEST(PlanDemo, PrintsAShortPlanWithARecommendation) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(plan_demo_section(f), 0);
  std::rewind(f);
  std::string text;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
  std::fclose(f);
  EXPECT_NE(text.find("llama-3-8b"), std::string::npos) << text;
  EXPECT_NE(text.find("top 3 of"), std::string::npos) << text;
  EXPECT_NE(text.find("Recommended: "), std::string::npos) << text;
}

}  // namespace
}  // namespace gm::cli
