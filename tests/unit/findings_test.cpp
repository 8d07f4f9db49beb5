// Findings on the shipped ResNet-50 profiler samples (TensorBoard plugin, V100): figures checked by hand
// against the trace's own idle-gap and window figures (docs/findings.md).
#include "findings/findings.h"

#include <gtest/gtest.h>

#include "catalog/catalog.h"
#include "meter/meter.h"
#include "report/multi.h"
#include "report/run_report.h"
#include "support/support.h"

namespace gm::findings {
namespace {

trace::DeviceAnalysis resnet(const std::string& workers) {
  auto set =
      trace::analyze_inputs({test::sample_traces_dir() + "/kineto_tb_plugin_samples/resnet50_" + workers});
  EXPECT_TRUE(set.ok());
  EXPECT_EQ(set->files.size(), 1u);
  EXPECT_EQ(set->files.front().devices.size(), 1u);
  return set->files.front().devices.front();
}

const Finding* find(const std::vector<Finding>& fs, const std::string& kind) {
  for (const auto& f : fs)
    if (f.kind == kind) return &f;
  return nullptr;
}

// Issue 38 changed this contract: host wait is split by what the host was doing. Before, all 382.676 ms of
// host wait of num_workers_0 was input_bound, and 21.8 % of num_workers_4's window too.
TEST(FindingsTest, InputBoundOnNumWorkersZeroGoneWithFourWorkersWhereDispatchRemains) {
  const MicroUsd price = 3'000'000;  // $3/GPU-hour
  const auto d0 = resnet("num_workers_0");
  const auto zero = for_trace_device(d0, price);
  const Finding* input = find(zero, "input_bound");
  ASSERT_NE(input, nullptr);
  EXPECT_EQ(input->severity, Severity::medium);
  // Of 382.676 ms host wait in 996.477 ms, 283.707 ms with the host inside
  // enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__ (28.5 %); 96.328 ms dispatching operators
  // (9.7 %, under the 10 % threshold) and 2.641 ms in gaps begun in a synchronisation.
  EXPECT_EQ(input->at_stake_ns, 283'707'000);
  EXPECT_EQ(d0.idle_input_dataloader_ns, 283'707'000);
  EXPECT_EQ(d0.idle_host_wait_ns, 382'676'000);
  EXPECT_EQ(d0.idle_dispatch_ns, 96'328'000);
  EXPECT_EQ(d0.idle_host_sync_ns, 2'641'000);
  EXPECT_EQ(find(zero, "dispatch_bound"), nullptr);
  // $3/h × 283.707 ms = $0.000236422(5) → 236 422 nano-dollars (floor of the pico-dollar figure / 1000).
  EXPECT_EQ(input->cost_nano_usd, 236'422);
  // Six ProfilerSteps: $0.0394037 per 1k steps.
  EXPECT_EQ(input->nano_usd_per_1k_steps, 39'403'750);
  // 28.5 % of a GPU at $3/h for 730 h: $623.51 a month.
  ASSERT_TRUE(input->nano_usd_per_month.has_value());
  EXPECT_NEAR(static_cast<double>(*input->nano_usd_per_month) / 1e9, 623.51, 0.01);
  EXPECT_NE(input->action.find("num_workers"), std::string::npos);

  // Four workers: the DataLoader iterations no longer hold the GPU (2.9 ms of input wait, 0.4 %); the host
  // wait left (21.8 %) is the host dispatching operators, which more workers would not fix.
  const auto d4 = resnet("num_workers_4");
  const auto four = for_trace_device(d4, price);
  EXPECT_EQ(find(four, "input_bound"), nullptr);
  EXPECT_LT(d4.idle_input_ns * 100, d4.window_ns);
  const Finding* dispatch4 = find(four, "dispatch_bound");
  ASSERT_NE(dispatch4, nullptr);
  EXPECT_EQ(dispatch4->at_stake_ns, d4.idle_dispatch_ns);
  EXPECT_EQ(dispatch4->severity, Severity::medium);
  EXPECT_NE(dispatch4->action.find("CUDA graphs"), std::string::npos);

  // Pageable copies: 12 "Memcpy HtoD (Pageable -> Device)" per trace.
  const Finding* pageable = find(zero, "pageable_copies");
  ASSERT_NE(pageable, nullptr);
  EXPECT_EQ(std::get<std::int64_t>(pageable->evidence[1].value), 12);
}

TEST(FindingsTest, WithoutAPriceFindingsKeepTheirTimeAndHaveNoDollars) {
  const auto fs = for_trace_device(resnet("num_workers_0"), std::nullopt);
  const Finding* input = find(fs, "input_bound");
  ASSERT_NE(input, nullptr);
  EXPECT_EQ(input->at_stake_ns, 283'707'000);
  EXPECT_FALSE(input->cost_nano_usd.has_value());
  EXPECT_FALSE(input->nano_usd_per_month.has_value());
}

TEST(FindingsTest, LaunchBoundAndExposedCommunicationFromTheirFigures) {
  trace::DeviceAnalysis d;
  d.window_ns = 1'000'000'000;
  d.busy_ns = 500'000'000;
  d.idle_ns = 500'000'000;
  d.idle_other_ns = 450'000'000;
  d.idle_host_wait_ns = 50'000'000;
  d.idle_input_ns = 50'000'000;
  d.compute_ns = 380'000'000;
  d.communication_ns = 120'000'000;
  d.overlap_ns = 30'000'000;
  d.activity_count = 100'000;
  d.kernel_ns = 500'000'000;  // 5 µs per kernel
  d.queue_depth = {100'000, 0.8, 0, 1, 2, 3, 0.5};
  d.launch_delay_ns = {100'000, 9000, 4000, 8000, 20000, 50000, 3000};
  const auto fs = for_trace_device(d, 2'000'000);
  const Finding* launch = find(fs, "launch_bound");
  ASSERT_NE(launch, nullptr);
  EXPECT_EQ(launch->at_stake_ns, 450'000'000);
  EXPECT_EQ(launch->severity, Severity::high);
  const Finding* comm = find(fs, "communication_exposed");
  ASSERT_NE(comm, nullptr);
  EXPECT_EQ(comm->at_stake_ns, 120'000'000);
  EXPECT_EQ(comm->severity, Severity::low);
  EXPECT_EQ(find(fs, "input_bound"), nullptr);  // 5 % host wait is under the 10 % threshold
  // A queue that stays full is not launch-bound, whatever the idle time.
  d.queue_depth.p50 = 8;
  EXPECT_EQ(find(for_trace_device(d, 2'000'000), "launch_bound"), nullptr);
}

trace::FileAnalysis sample(const std::string& name) {
  auto f = trace::analyze_file(test::source_dir() + "/tests/data/trace/" + name);
  EXPECT_TRUE(f.ok()) << name;
  return f.ok() ? *f : trace::FileAnalysis{};
}

const catalog::Catalog& catalog() {
  static const catalog::Catalog c = *catalog::Catalog::builtin();
  return c;
}

template <class T>
T evidence(const Finding& f, const std::string& key) {
  for (const auto& e : f.evidence)
    if (e.key == key) return std::get<T>(e.value);
  ADD_FAILURE() << "no evidence " << key;
  return T{};
}

TEST(FindingsTest, KernelNamesTellFp32FromTensorCoreMath) {
  using trace::kernel_math;
  using trace::KernelMath;
  EXPECT_EQ(kernel_math("volta_sgemm_64x64_nt"), KernelMath::fp32);
  EXPECT_EQ(kernel_math("volta_scudnn_128x128_stridedB_splitK_small_nn_v1"), KernelMath::fp32);
  EXPECT_EQ(kernel_math("ampere_sgemm_128x64_nn"), KernelMath::fp32);
  EXPECT_EQ(kernel_math("void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>(int, int)"),
            KernelMath::fp32);
  EXPECT_EQ(kernel_math(
                "void implicit_convolve_sgemm<float, float, 1024, 6, 7, 3, 3, 5, 1, false, true, true>(int)"),
            KernelMath::fp32);
  EXPECT_EQ(kernel_math("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4>(Params)"),
            KernelMath::tensor_core);
  EXPECT_EQ(kernel_math("volta_fp16_s884cudnn_fp16_256x128_ldg8_relu_f2f_exp_small_nhwc_tn_v1"),
            KernelMath::tensor_core);
  EXPECT_EQ(kernel_math("sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw"),
            KernelMath::tensor_core);
  EXPECT_EQ(kernel_math("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_nt"),
            KernelMath::tensor_core);
  EXPECT_EQ(kernel_math("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1"),
            KernelMath::tensor_core);
  // Hopper's cuBLAS / cuDNN fp32 kernels carry "xmma" and run FFMA on the CUDA cores: "xmma" alone is no
  // tensor-core marker (issue 38); cuBLASLt's nvjet kernels are tensor-core GEMMs.
  EXPECT_EQ(
      kernel_math("sm80_xmma_gemm_f32f32_f32f32_f32_nt_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma_aligna4_"
                  "alignc4_execute_kernel__5x_cublas"),
      KernelMath::fp32);
  EXPECT_EQ(
      kernel_math("sm80_xmma_wgrad_implicit_gemm_indexed_f32f32_f32f32_f32_nhwckrsc_nhwc_tilesize32x32x8_"
                  "stage3_warpsize1x2x1_g1_ffma_execute_kernel__5x_cudnn"),
      KernelMath::fp32);
  EXPECT_EQ(kernel_math("void gemmSN_TN_kernel<float, 128, 16, 2, 4, 4, 4, true>(cublasGemmSmallNParams)"),
            KernelMath::fp32);
  EXPECT_EQ(kernel_math("void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>(Params)"),
            KernelMath::fp32);
  EXPECT_EQ(kernel_math("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"), KernelMath::tensor_core);
  EXPECT_EQ(kernel_math("sm80_xmma_gemm_unknown_layout_kernel"), KernelMath::other);  // cannot tell
  // AMD Tensile kernels name their matrix-core (MFMA) instruction.
  EXPECT_EQ(kernel_math("Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_SN_LDSB0"),
            KernelMath::tensor_core);
  // Normalisations, layout transforms, matrix-vector products and elementwise kernels are none of it.
  EXPECT_EQ(kernel_math("void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 512, true, 1>(float)"),
            KernelMath::other);
  EXPECT_EQ(kernel_math("void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true>(params)"),
            KernelMath::other);
  EXPECT_EQ(
      kernel_math("void gemv2T_kernel_val<int, int, float, float, float, 128, 16, 4, 4, false>(params)"),
      KernelMath::other);
  EXPECT_EQ(
      kernel_math("void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>(int)"),
      KernelMath::other);
  EXPECT_TRUE(trace::is_fused_attention_kernel(
      "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64>>()"));
  EXPECT_TRUE(
      trace::is_fused_attention_kernel("fmha_cutlassF_f16_aligned_64x64_rf_sm80(PyTorchMemEffAttention)"));
  EXPECT_FALSE(
      trace::is_fused_attention_kernel("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_nt"));
}

TEST(FindingsTest, Fp32MathOnTheResNet50V100SampleWithDollars) {
  // ResNet-50 trained in fp32 on a V100 (tensor cores since Volta): its convolutions and GEMMs run as
  // volta_sgemm / volta_scudnn / cudnn <float> kernels on the CUDA cores.
  const auto file = sample("resnet50_v100_num_workers_0.json.gz");
  ASSERT_EQ(file.devices.size(), 1u);
  const auto& d = file.devices.front();
  EXPECT_EQ(d.compute_major, 7);
  const auto fs = for_trace_device(d, MicroUsd{3'000'000}, &catalog());
  const Finding* f = find(fs, "fp32_math");
  ASSERT_NE(f, nullptr);
  // The speed-up: V100 SXM 32GB fp16 tensor-core 125 TFLOPS / fp32 15.7 TFLOPS (the catalog's figures).
  EXPECT_NEAR(evidence<double>(*f, "speedup_assumed"), 125.0 / 15.7, 1e-9);
  EXPECT_NE(evidence<std::string>(*f, "speedup_basis").find("V100 SXM 32GB"), std::string::npos);
  const auto fp32_ns = evidence<std::int64_t>(*f, "fp32_matrix_ns");
  EXPECT_EQ(fp32_ns, d.matrix_math.fp32_ns);
  // This trace has record_shapes: the figure comes from the operators' input dtypes (issue 38; before, from
  // the kernel names alone). The kernel-family table, applied to every kernel name, agrees within 0.5 %.
  EXPECT_GT(d.matrix_math.from_dtypes_count, 1000);
  std::int64_t by_names = 0;
  for (const auto& k : d.kernels)
    if (trace::kernel_math(k.name) == trace::KernelMath::fp32) by_names += k.attributed_ns;
  EXPECT_NEAR(static_cast<double>(fp32_ns), static_cast<double>(by_names),
              0.005 * static_cast<double>(by_names));
  EXPECT_GT(fp32_ns, d.busy_ns / 2);  // most of ResNet-50's GPU time is convolutions
  EXPECT_EQ(f->at_stake_ns, static_cast<std::int64_t>(static_cast<double>(fp32_ns) * (1 - 15.7 / 125.0)));
  EXPECT_EQ(f->severity, Severity::high);
  ASSERT_TRUE(f->cost_nano_usd.has_value());
  EXPECT_EQ(*f->cost_nano_usd, meter::gpu_ns_cost_pico_usd(3'000'000, f->at_stake_ns) / 1000);
  EXPECT_GT(*f->cost_nano_usd, 0);
  ASSERT_TRUE(f->nano_usd_per_1k_steps.has_value());
  // Volta: fp16 with a GradScaler (no bf16), channels_last for the convolutions.
  EXPECT_NE(f->action.find("torch.autocast"), std::string::npos);
  EXPECT_NE(f->action.find("GradScaler"), std::string::npos);
  EXPECT_NE(f->action.find("channels_last"), std::string::npos);
  // Without a catalog, computeMajor still says tensor cores; the speed-up is then the stated 2x assumption.
  const auto bare_findings = for_trace_device(d, MicroUsd{3'000'000});
  const Finding* bare = find(bare_findings, "fp32_math");
  ASSERT_NE(bare, nullptr);
  EXPECT_EQ(evidence<double>(*bare, "speedup_assumed"), 2.0);
  // A Pascal GPU (no tensor cores) gets no fp32_math finding.
  auto pascal = d;
  pascal.compute_major = 6;
  pascal.gpu_name = "Tesla P100-SXM2-16GB";
  EXPECT_EQ(find(for_trace_device(pascal, MicroUsd{3'000'000}, &catalog()), "fp32_math"), nullptr);
}

/// The same trace as mixed-precision training would launch it: each fp32 GEMM / convolution kernel renamed
/// to the tensor-core kernel cuBLAS / cuDNN pick for it under torch.autocast on a V100.
std::string tensor_core_version(std::string json) {
  std::string out;
  std::size_t pos = 0;
  const std::string key = "\"name\": \"";
  int renamed = 0;
  for (;;) {
    const auto at = json.find(key, pos);
    if (at == std::string::npos) break;
    const auto begin = at + key.size();
    const auto end = json.find('"', begin);
    out.append(json, pos, begin - pos);
    std::string name = json.substr(begin, end - begin);
    if (trace::kernel_math(name) == trace::KernelMath::fp32) {
      ++renamed;
      if (name.find("dgrad") != std::string::npos)
        name = "volta_fp16_s884cudnn_fp16_256x128_ldg8_dgrad_f2f_exp_small_nhwc2nchw_tt_v1";
      else if (name.find("wgrad") != std::string::npos)
        name = "volta_fp16_s884cudnn_fp16_256x64_ldg8_wgrad_idx_exp_interior_nhwc_nt_v1";
      else if (name.find("volta_sgemm") != std::string::npos)
        name = "volta_h884gemm_64x64_ldg8_nn";
      else
        name = "volta_fp16_s884cudnn_fp16_256x128_ldg8_relu_f2f_exp_small_nhwc_tn_v1";
    }
    out += name;
    pos = end;
  }
  out.append(json, pos, std::string::npos);
  EXPECT_GT(renamed, 1000);
  return out;
}

TEST(FindingsTest, Fp32MathNotOnTheTensorCoreVersionOfTheSameTrace) {
  auto text =
      trace::read_trace_text(test::source_dir() + "/tests/data/trace/resnet50_v100_num_workers_0.json.gz");
  ASSERT_TRUE(text.ok());
  auto file = trace::analyze_buffer("resnet50_amp", tensor_core_version(*text));
  ASSERT_TRUE(file.ok());
  ASSERT_EQ(file->devices.size(), 1u);
  const auto fs = for_trace_device(file->devices.front(), MicroUsd{3'000'000}, &catalog());
  EXPECT_EQ(find(fs, "fp32_math"), nullptr);
  EXPECT_NE(find(fs, "input_bound"), nullptr);  // the rest of the advice is unchanged
}

TEST(FindingsTest, UnfusedAttentionOnTheRecordedExplicitAttentionTraceNotOnSdpa) {
  // Real PyTorch profiler traces of a GPT-2-shaped model trained on the CPU (tests/torch/
  // record_attention_traces.py): CPU-only traces get host findings.
  const auto explicit_cpu = sample("gpt2_attention_explicit_cpu.json.gz");
  ASSERT_TRUE(explicit_cpu.devices.empty());
  ASSERT_TRUE(explicit_cpu.host.has_value());
  // 2 blocks x (forward + backward) x 2 profiled steps.
  EXPECT_EQ(explicit_cpu.host->attention.chains, 8);
  EXPECT_EQ(explicit_cpu.host->attention.fused, 0);
  const auto host = for_trace_host(*explicit_cpu.host, MicroUsd{3'000'000});
  const Finding* f = find(host, "unfused_attention");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->at_stake_ns,
            explicit_cpu.host->attention.host_ns - explicit_cpu.host->attention.host_matmul_ns);
  EXPECT_GT(f->at_stake_ns, 0);
  EXPECT_TRUE(f->cost_nano_usd.has_value());
  EXPECT_NE(f->action.find("torch.nn.functional.scaled_dot_product_attention"), std::string::npos);

  const auto sdpa_cpu = sample("gpt2_attention_sdpa_cpu.json.gz");
  ASSERT_TRUE(sdpa_cpu.host.has_value());
  EXPECT_GT(sdpa_cpu.host->attention.fused, 0);
  EXPECT_EQ(sdpa_cpu.host->attention.chains, 0);
  EXPECT_EQ(find(for_trace_host(*sdpa_cpu.host, MicroUsd{3'000'000}), "unfused_attention"), nullptr);

  // The GPU-shaped traces built from them: kernels launched by the chains, flash kernels for SDPA.
  const auto explicit_gpu = sample("gpt2_attention_explicit_gpu.json.gz");
  ASSERT_EQ(explicit_gpu.devices.size(), 1u);
  const auto& d = explicit_gpu.devices.front();
  EXPECT_EQ(d.attention.chains, 8);
  EXPECT_GT(d.attention.matmul_kernel_ns, 0);
  EXPECT_GT(d.attention.kernel_ns, d.attention.matmul_kernel_ns);
  const auto gpu = for_trace_device(d, MicroUsd{2'000'000}, &catalog());
  const Finding* g = find(gpu, "unfused_attention");
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->at_stake_ns, d.attention.kernel_ns - d.attention.matmul_kernel_ns);
  ASSERT_TRUE(g->cost_nano_usd.has_value());
  EXPECT_EQ(*g->cost_nano_usd, meter::gpu_ns_cost_pico_usd(2'000'000, g->at_stake_ns) / 1000);
  EXPECT_EQ(find(gpu, "fp32_math"), nullptr);  // its GEMMs are bf16 tensor-core kernels

  const auto sdpa_gpu = sample("gpt2_attention_sdpa_gpu.json.gz");
  ASSERT_EQ(sdpa_gpu.devices.size(), 1u);
  EXPECT_GT(sdpa_gpu.devices.front().attention.fused, 0);
  EXPECT_EQ(
      find(for_trace_device(sdpa_gpu.devices.front(), MicroUsd{2'000'000}, &catalog()), "unfused_attention"),
      nullptr);
}

}  // namespace
}  // namespace gm::findings

namespace gm {
namespace {

TEST(FleetFindingsTest, WasteOfThePeriodNamesTheRunThatWastedMostWithItsMonthlyRate) {
  report::MultiReport rep;
  rep.since_unix_ms = 0;
  rep.until_unix_ms = 10LL * 86'400'000;  // a 10-day period
  rep.total.runs = 3;
  rep.total.gpu_hours = 100;
  rep.total.cost_micros = 400'000'000;            // $400
  rep.total.idle_cost_micros = 60'000'000;        // $60
  rep.total.unused_gpu_cost_micros = 40'000'000;  // $40: waste $100 = 25 %
  report::TopRun a;
  a.id = 7;
  a.command = "python train.py";
  a.cost_micros = 300'000'000;
  a.waste_micros = 30'000'000;
  report::TopRun b;
  b.id = 9;
  b.command = "python eval.py";
  b.cost_micros = 100'000'000;
  b.waste_micros = 70'000'000;
  rep.top_runs = {a, b};
  const auto fs = report::multi_findings(rep);
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_EQ(fs[0].kind, "fleet_waste");
  EXPECT_EQ(fs[0].severity, findings::Severity::medium);  // 25 %: medium from 15 %, high from 30 %
  EXPECT_EQ(fs[0].cost_nano_usd, 100'000'000'000);
  // $100 in 10 days (240 h) is $304.17 in 730 h.
  EXPECT_EQ(fs[0].nano_usd_per_month, 304'166'666'666);
  EXPECT_NE(fs[0].summary.find("cost $100.00 (25% of $400.00) over 3 run(s)"), std::string::npos)
      << fs[0].summary;
  EXPECT_NE(fs[0].action.find("start with run 9 (python eval.py, $70.00 wasted)"), std::string::npos)
      << fs[0].action;
  // Under 5 % of the cost: nothing to say.
  rep.total.idle_cost_micros = 10'000'000;
  rep.total.unused_gpu_cost_micros = 0;
  EXPECT_TRUE(report::multi_findings(rep).empty());
}

}  // namespace
}  // namespace gm

namespace gm {
namespace {

TEST(RunStartupTest, BilledTimeBeforeTheFirstGpuWorkWithItsCostAndShares) {
  // Two GPUs at $3.60/GPU-h ($0.001 a second each): both idle until 5 s, then GPU 1 works from 6 s and GPU
  // 0 from 8 s; 20 one-second samples each.
  std::vector<store::SampleRecord> samples;
  for (int t = 1; t <= 20; ++t)
    for (unsigned gpu : {0u, 1u}) {
      store::SampleRecord s;
      s.t_ms = t * 1000;
      s.gpu_index = gpu;
      s.gpu_uuid = "GPU-" + std::to_string(gpu);
      s.utilization_pct = t > (gpu == 0 ? 8 : 6) ? 80.0 : (t == 3 ? 4.9 : 0.0);  // 4.9 % is still idle
      s.job_present = gpu == 1 && t > 6;
      s.cost_micros = 1000;
      samples.push_back(s);
    }
  auto usage = meter::gpu_usage_from_samples(samples);
  ASSERT_EQ(usage.size(), 2u);
  // The first sample showing work (t = 9 s, t = 7 s) closes the interval in which it began.
  EXPECT_EQ(usage[0].first_busy_ms, 8000);
  EXPECT_EQ(usage[1].first_busy_ms, 6000);
  EXPECT_FALSE(usage[0].first_process_ms.has_value());
  EXPECT_EQ(usage[1].first_process_ms, 6000);
  store::RunRecord run;
  run.wall_ms = 20'000;
  run.billed_s = 20;
  run.cost_micros = 40'000;
  run.price_micros_per_gpu_hour = 3'600'000;
  run.gpus_allocated = {"GPU-0", "GPU-1"};
  run.gpus_used = {"GPU-1"};
  std::vector<store::ProgressRecord> progress(1);
  progress[0].t_ms = 20'000;  // the last point: the first step is not known earlier than the GPU's work
  progress[0].step = 100;
  progress[0].total_steps = 1000;
  auto r = report::build_run_report(run, usage, progress, {}, nullptr);
  ASSERT_TRUE(r.startup.has_value());
  EXPECT_EQ(r.startup->ms, 6000);
  EXPECT_EQ(r.startup->cost_micros, 12'000);  // 6 s × 2 GPUs × $0.001
  EXPECT_DOUBLE_EQ(r.startup->share_of_run, 0.3);
  // The 100 steps cost $0.028 after the start-up: 1000 steps cost $0.28, and the whole job $0.292.
  ASSERT_TRUE(r.startup->total_micros.has_value());
  EXPECT_EQ(*r.startup->total_micros, 292'000);
  EXPECT_NEAR(*r.startup->share_of_total, 12.0 / 292.0, 1e-12);
  const findings::Finding* f = nullptr;
  for (const auto& x : r.findings)
    if (x.kind == "startup_overhead") f = &x;
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, findings::Severity::high);  // 30 % of the run's cost
  EXPECT_EQ(f->cost_nano_usd, 12'000'000);
  EXPECT_EQ(f->at_stake_ns, 12'000'000'000);  // 6 s on 2 GPUs
  EXPECT_NE(report::render_run_report_text(r).find("start-up        6.0s before the first GPU work"),
            std::string::npos)
      << report::render_run_report_text(r);

  // A start-up under 5 % of the run's cost is a figure, not a finding; no GPU work at all is neither.
  run.cost_micros = 400'000;
  run.wall_ms = 200'000;
  auto small = report::build_run_report(run, usage, {}, {}, nullptr);
  ASSERT_TRUE(small.startup.has_value());
  for (const auto& x : small.findings) EXPECT_NE(x.kind, "startup_overhead");
  for (auto& s : samples) {
    s.utilization_pct = 0.0;
    s.job_present = false;
  }
  EXPECT_FALSE(report::build_run_report(run, meter::gpu_usage_from_samples(samples), {}, {}, nullptr)
                   .startup.has_value());
}

}  // namespace
}  // namespace gm
