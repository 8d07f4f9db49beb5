// The corpus of real traces recorded on an H200 (tests/data/h200_traces/README.md): the findings each must
// and must not give, and the figures behind them computed here independently from the trace's own events.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "catalog/catalog.h"
#include "findings/findings.h"
#include "meter/meter.h"
#include "support/support.h"
#include "trace/trace.h"

namespace gm {
namespace {

using findings::Finding;

std::string corpus_dir() {
  return test::source_dir() + "/tests/data/h200_traces";
}

/// The corpus file whose name starts with `prefix`.
std::string corpus_file(const std::string& prefix) {
  for (const auto& e : std::filesystem::directory_iterator(corpus_dir()))
    if (e.path().filename().string().starts_with(prefix)) return e.path().string();
  ADD_FAILURE() << "no corpus file " << prefix;
  return {};
}

const catalog::Catalog& catalog() {
  static const catalog::Catalog c = *catalog::Catalog::builtin();
  return c;
}

trace::FileAnalysis analyse(const std::string& prefix) {
  auto f = trace::analyze_file(corpus_file(prefix));
  EXPECT_TRUE(f.ok()) << prefix;
  if (!f.ok()) return {};
  EXPECT_EQ(f->devices.size(), 1u) << prefix;
  return *f;
}

std::vector<Finding> findings_of(const trace::DeviceAnalysis& d) {
  return findings::for_trace_device(d, MicroUsd{3'500'000}, &catalog());
}

const Finding* find(const std::vector<Finding>& fs, const std::string& kind) {
  for (const auto& f : fs)
    if (f.kind == kind) return &f;
  return nullptr;
}

template <class T>
T evidence(const Finding& f, const std::string& key) {
  for (const auto& e : f.evidence)
    if (e.key == key) return std::get<T>(e.value);
  ADD_FAILURE() << "no evidence " << key << " in " << f.kind;
  return T{};
}

struct Expectation {
  std::string prefix;
  std::vector<std::string> must;
  std::vector<std::string> must_not;
};

const std::vector<Expectation>& corpus() {
  static const std::vector<Expectation> c = {
      {"resnet50_fp32", {"fp32_math"}, {"input_bound", "dispatch_bound", "launch_bound"}},
      {"resnet50_bf16_channels_last", {"dispatch_bound"}, {"input_bound", "fp32_math", "launch_bound"}},
      {"qwen2_small_bf16_eager", {"dispatch_bound"}, {"input_bound", "fp32_math", "launch_bound"}},
      {"qwen2_small_bf16_sdpa",
       {"dispatch_bound"},
       {"input_bound", "fp32_math", "launch_bound", "unfused_attention"}},
      {"qwen2_small_infer_cudagraphs.1795787586068005056", {}, {"input_bound", "fp32_math", "launch_bound"}},
      {"qwen2_small_infer_cudagraphs.1795787586081148231",
       {},
       {"input_bound", "dispatch_bound", "launch_bound"}},
      {"resnet18_dataloader_4workers_pinned", {}, {"input_bound", "fp32_math", "launch_bound"}},
      // The main process decodes every batch between steps: the GPU waits on the input pipeline.
      {"resnet18_decode_0workers", {"input_bound"}, {"dispatch_bound", "fp32_math", "launch_bound"}},
      // The same with 4 workers whose prefetched batches are ready: the host's own dispatching shows instead.
      {"resnet18_decode_4workers_pinned", {"dispatch_bound"}, {"input_bound", "fp32_math", "launch_bound"}},
  };
  return c;
}

TEST(TraceCorpus, EveryRealTraceGivesTheFindingsItMustAndNoneItMustNot) {
  std::set<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(corpus_dir()))
    if (e.path().filename().string().ends_with(".pt.trace.json.gz"))
      files.insert(e.path().filename().string());
  EXPECT_EQ(files.size(), corpus().size()) << "every corpus file has its expectations here";
  for (const auto& c : corpus()) {
    const auto file = analyse(c.prefix);
    ASSERT_EQ(file.devices.size(), 1u) << c.prefix;
    const auto& d = file.devices.front();
    const auto fs = findings_of(d);
    std::string kinds;
    for (const auto& f : fs) kinds += f.kind + " ";
    for (const auto& k : c.must)
      EXPECT_NE(find(fs, k), nullptr) << c.prefix << " must give " << k << ": " << kinds;
    for (const auto& k : c.must_not)
      EXPECT_EQ(find(fs, k), nullptr) << c.prefix << " must not give " << k << ": " << kinds;
    // Host wait is split without remainder: dispatching, waiting for input, or a gap begun in a sync.
    EXPECT_EQ(d.idle_host_wait_ns, d.idle_dispatch_ns + d.idle_input_ns + d.idle_host_sync_ns) << c.prefix;
    EXPECT_LE(d.idle_in_graph_ns, d.idle_other_ns) << c.prefix;
    // No anonymous operator row holds the work queued before the window: the operator rows and the named
    // before-window figure add up to the busy time.
    std::int64_t ops = 0, steps = 0;
    for (const auto& b : d.operators) ops += b.attributed_ns;
    for (const auto& b : d.steps) steps += b.attributed_ns;
    EXPECT_EQ(ops + d.before_window.attributed_ns, d.busy_ns) << c.prefix;
    EXPECT_EQ(steps + d.before_window.attributed_ns, d.busy_ns) << c.prefix;
  }
}

TEST(TraceCorpus, DispatchBoundTracesGetCudaGraphAndCompileAdviceWithDollars) {
  for (const char* prefix :
       {"resnet50_bf16_channels_last", "qwen2_small_bf16_eager", "qwen2_small_bf16_sdpa"}) {
    const auto file = analyse(prefix);
    ASSERT_EQ(file.devices.size(), 1u);
    const auto& d = file.devices.front();
    const auto fs = findings_of(d);
    const Finding* f = find(fs, "dispatch_bound");
    ASSERT_NE(f, nullptr) << prefix;
    EXPECT_EQ(f->at_stake_ns, d.idle_dispatch_ns) << prefix;
    // The README's reading: the GPU waits on a host busy dispatching for a third of the window or more.
    EXPECT_GT(d.idle_dispatch_ns * 10, d.window_ns * 3) << prefix;
    EXPECT_EQ(f->severity, findings::Severity::high) << prefix;
    EXPECT_NE(f->action.find("CUDA graphs"), std::string::npos) << f->action;
    EXPECT_NE(f->action.find("torch.compile"), std::string::npos) << f->action;
    EXPECT_EQ(f->action.find("DataLoader"), std::string::npos) << f->action;
    ASSERT_TRUE(f->cost_nano_usd.has_value());
    EXPECT_EQ(*f->cost_nano_usd, meter::gpu_ns_cost_pico_usd(3'500'000, f->at_stake_ns) / 1000);
    ASSERT_TRUE(f->nano_usd_per_1k_steps.has_value());
    EXPECT_FALSE(evidence<std::string>(*f, "host_op_1").empty());
    // Nothing loads data in these runs: what is left for input is the Python between steps, a few percent.
    EXPECT_LT(d.idle_input_ns * 20, d.window_ns) << prefix;
    EXPECT_EQ(d.idle_input_dataloader_ns, 0) << prefix;
  }
}

TEST(TraceCorpus, AHealthyFourWorkerPipelineIsNotInputBound) {
  const auto file = analyse("resnet18_dataloader_4workers_pinned");
  ASSERT_EQ(file.devices.size(), 1u);
  const auto& d = file.devices.front();
  // Its DataLoader iterations take ~60 µs: the data is ready when the step asks for it.
  EXPECT_LT(d.idle_input_ns * 20, d.window_ns);
  EXPECT_EQ(find(findings_of(d), "input_bound"), nullptr);
}

TEST(TraceCorpus, CudaGraphTraceGapsAreTheGraphsOwnOrClassifiedNeverInputBound) {
  const auto file = analyse("qwen2_small_infer_cudagraphs.1795787586068005056");
  ASSERT_EQ(file.devices.size(), 1u);
  const auto& d = file.devices.front();
  EXPECT_EQ(d.graph_launches, 2);  // one cudaGraphLaunch per profiled step starts the whole model
  EXPECT_GT(d.idle_in_graph_ns, 0);
  EXPECT_EQ(d.idle_input_dataloader_ns, 0);
  EXPECT_LT(d.idle_input_ns * 10, d.window_ns);
  EXPECT_EQ(find(findings_of(d), "input_bound"), nullptr);
  // The second file holds only kernels of a graph launched before its window: nothing to classify.
  const auto late = analyse("qwen2_small_infer_cudagraphs.1795787586081148231");
  ASSERT_EQ(late.devices.size(), 1u);
  EXPECT_EQ(late.devices.front().before_window.count, late.devices.front().activity_count);
  EXPECT_EQ(late.devices.front().idle_host_wait_ns, 0);
}

// --- independent figures from the trace's own events ---

std::int64_t ns_of(const nlohmann::json& v) {
  return std::llround(v.get<double>() * 1000.0);
}

struct Event {
  std::string name;
  std::int64_t start, end;
};

/// The trace's events, read with nlohmann::json (not gpumeter's reader).
struct RawCorpusTrace {
  std::vector<Event> activities;  // kernel / memcpy / memset with dur > 0, in file order
  std::vector<std::int64_t> correlation;
  std::vector<bool> is_kernel;
  std::map<std::int64_t, std::pair<std::string, std::int64_t>> launch;  // correlation → (thread, ts)
  std::map<std::string, std::vector<nlohmann::json>> ops;               // thread → cpu_op events
};

RawCorpusTrace read_raw(const std::string& prefix) {
  auto text = trace::read_trace_text(corpus_file(prefix));
  EXPECT_TRUE(text.ok());
  RawCorpusTrace r;
  const auto j = nlohmann::json::parse(*text);
  for (const auto& e : j["traceEvents"]) {
    if (e.value("ph", "") != "X") continue;
    const std::string cat = e.value("cat", "");
    const std::string thread = e["pid"].dump() + "/" + e["tid"].dump();
    if (cat == "kernel" || cat == "gpu_memcpy" || cat == "gpu_memset") {
      if (ns_of(e["dur"]) <= 0) continue;
      r.activities.push_back(
          {e["name"].get<std::string>(), ns_of(e["ts"]), ns_of(e["ts"]) + ns_of(e["dur"])});
      r.correlation.push_back(e["args"].value("correlation", std::int64_t{-1}));
      r.is_kernel.push_back(cat == "kernel");
    } else if (cat == "cuda_runtime" || cat == "cuda_driver") {
      const auto c = e["args"].value("correlation", std::int64_t{-1});
      if (c >= 0 && !r.launch.contains(c)) r.launch[c] = {thread, ns_of(e["ts"])};
    } else if (cat == "cpu_op") {
      r.ops[thread].push_back(e);
    }
  }
  return r;
}

/// Each activity's fair share of busy time, by brute force: every instant split equally among the
/// activities running then.
std::vector<double> fair_shares(const std::vector<Event>& acts) {
  std::vector<std::int64_t> edges;
  for (const auto& a : acts) {
    edges.push_back(a.start);
    edges.push_back(a.end);
  }
  std::sort(edges.begin(), edges.end());
  edges.erase(std::unique(edges.begin(), edges.end()), edges.end());
  std::vector<double> share(acts.size(), 0);
  std::vector<std::size_t> order(acts.size());
  for (std::size_t i = 0; i < acts.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](auto x, auto y) { return acts[x].start < acts[y].start; });
  std::vector<std::size_t> active;
  std::size_t next = 0;
  for (std::size_t e = 0; e + 1 < edges.size(); ++e) {
    const std::int64_t t0 = edges[e], t1 = edges[e + 1];
    while (next < order.size() && acts[order[next]].start <= t0) active.push_back(order[next++]);
    std::erase_if(active, [&](std::size_t i) { return acts[i].end <= t0; });
    if (active.empty()) continue;
    for (auto i : active) share[i] += static_cast<double>(t1 - t0) / static_cast<double>(active.size());
  }
  return share;
}

TEST(TraceCorpus, Fp32MathOnResNet50Fp32CoversEveryFp32ConvolutionAndGemm) {
  const RawCorpusTrace raw = read_raw("resnet50_fp32");
  // Which kernels are fp32 convolutions / GEMMs, from the operators: the innermost cpu_op around each
  // kernel's launch call is a convolution or GEMM whose first input is fp32 (record_shapes), and the kernel
  // is not one of their normalisation / layout / scaling helpers.
  const std::set<std::string> matrix_ops = {"aten::cudnn_convolution", "aten::convolution_backward",
                                            "aten::mm", "aten::addmm"};
  auto helper = [](const std::string& k) {
    for (const char* h :
         {"bn_", "elementwise", "nchwToNhwc", "nhwcToNchw", "scalePackedTensor", "AddPadding"})
      if (k.find(h) != std::string::npos) return true;
    return false;
  };
  std::vector<int> fp32(raw.activities.size(), 0);  // 1 fp32, 0 not, -1 launched before the window
  std::set<std::string> fp32_names;
  std::int64_t without_launch = 0;
  for (std::size_t i = 0; i < raw.activities.size(); ++i) {
    auto l = raw.launch.find(raw.correlation[i]);
    if (l == raw.launch.end()) {
      fp32[i] = -1;
      ++without_launch;
      continue;
    }
    if (!raw.is_kernel[i] || helper(raw.activities[i].name)) continue;
    const nlohmann::json* inner = nullptr;
    for (const auto& op : raw.ops.at(l->second.first)) {
      const auto t0 = ns_of(op["ts"]), t1 = t0 + ns_of(op["dur"]);
      if (t0 <= l->second.second && l->second.second <= t1 &&
          (inner == nullptr || t0 >= ns_of((*inner)["ts"])))
        inner = &op;
    }
    if (inner == nullptr || !matrix_ops.contains((*inner)["name"].get<std::string>())) continue;
    if ((*inner)["args"]["Input type"][0] != "float") continue;
    fp32[i] = 1;
    fp32_names.insert(raw.activities[i].name);
  }
  // Kernels launched before the window have no launch call: the same kernels as those of the window.
  const auto shares = fair_shares(raw.activities);
  double expected_ns = 0, busy_ns = 0;
  std::int64_t expected_kernel_ns = 0, expected_count = 0, before_window_fp32 = 0;
  for (std::size_t i = 0; i < raw.activities.size(); ++i) {
    busy_ns += shares[i];
    const bool is_fp32 =
        fp32[i] == 1 || (fp32[i] == -1 && raw.is_kernel[i] && fp32_names.contains(raw.activities[i].name));
    if (!is_fp32) continue;
    expected_ns += shares[i];
    expected_kernel_ns += raw.activities[i].end - raw.activities[i].start;
    ++expected_count;
    if (fp32[i] == -1) ++before_window_fp32;
  }
  EXPECT_GT(without_launch, 400);      // 469 activities queued during warm-up
  EXPECT_GT(before_window_fp32, 100);  // many of them fp32 convolutions
  // The reading: fp32 GEMMs and convolutions hold three quarters of the GPU's busy time.
  EXPECT_GT(expected_ns, 0.70 * busy_ns);

  const auto file = analyse("resnet50_fp32");
  ASSERT_EQ(file.devices.size(), 1u);
  const auto& d = file.devices.front();
  EXPECT_NEAR(static_cast<double>(d.busy_ns), busy_ns, 2.0);
  const auto fs = findings_of(d);
  const Finding* f = find(fs, "fp32_math");
  ASSERT_NE(f, nullptr);
  EXPECT_NEAR(static_cast<double>(evidence<std::int64_t>(*f, "fp32_matrix_ns")), expected_ns, 16.0);
  EXPECT_EQ(evidence<std::int64_t>(*f, "fp32_matrix_kernel_ns"), expected_kernel_ns);
  EXPECT_EQ(evidence<std::int64_t>(*f, "fp32_matrix_kernels"), expected_count);
  EXPECT_GT(evidence<std::int64_t>(*f, "fp32_before_window_ns"), 0);
  // TF32 is off: no tensor-core GEMM or convolution at all ("xmma" in a name is no tensor-core marker).
  EXPECT_EQ(evidence<std::int64_t>(*f, "tensor_core_matrix_ns"), 0);
  EXPECT_EQ(f->severity, findings::Severity::high);
  EXPECT_NE(f->action.find("bfloat16"), std::string::npos);
}

TEST(TraceCorpus, KernelsLaunchedBeforeTheWindowAreNamedAndKeptOutOfOperatorsAndSteps) {
  const RawCorpusTrace raw = read_raw("resnet50_fp32");
  std::int64_t expected = 0, expected_kernel_ns = 0;
  for (std::size_t i = 0; i < raw.activities.size(); ++i)
    if (!raw.launch.contains(raw.correlation[i])) {
      ++expected;
      expected_kernel_ns += raw.activities[i].end - raw.activities[i].start;
    }
  const auto file = analyse("resnet50_fp32");
  ASSERT_EQ(file.devices.size(), 1u);
  const auto& d = file.devices.front();
  EXPECT_EQ(d.before_window.count, expected);
  EXPECT_EQ(d.before_window.kernel_ns, expected_kernel_ns);
  EXPECT_GT(d.before_window.attributed_ns * 5, d.busy_ns);  // a quarter of the GPU time
  ASSERT_FALSE(d.before_window.kernels.empty());
  std::int64_t by_name = 0;
  for (const auto& b : d.before_window.kernels) by_name += b.attributed_ns;
  EXPECT_EQ(by_name, d.before_window.attributed_ns);
  for (const auto& b : d.operators) EXPECT_NE(b.name, "(no operator)") << b.count;
  for (const auto& b : d.steps) EXPECT_NE(b.name, "(outside steps)") << b.count;
  // The profiler's two steps; their GPU work spans the window less the warm-up work queued before it.
  EXPECT_EQ(d.step_ns.count, 2);
  ASSERT_TRUE(d.steps_span.has_value());
  EXPECT_GE(d.steps_span->start_ns, d.before_window.end_ns - 1000);
  EXPECT_LT(d.steps_span->span_ns, d.window_ns - d.before_window.kernel_ns / 2);
}

TEST(TraceCorpus, TraceDiffComparesTheProfilersStepsNotTheWarmUpQueue) {
  // A trace against itself with the before-window work taken out per step: the window per step is the
  // GPU span of the steps' own work.
  const auto file = analyse("resnet50_fp32");
  auto diff = trace::diff_traces({file}, {file}, trace::DiffOptions{});
  ASSERT_TRUE(diff.ok());
  EXPECT_EQ(diff->per, "step");
  ASSERT_TRUE(file.devices.front().steps_span.has_value());
  const auto& window = diff->summary.front();
  EXPECT_EQ(window.name, "window");
  EXPECT_DOUBLE_EQ(window.base_ns, static_cast<double>(file.devices.front().steps_span->span_ns) / 2);
  EXPECT_TRUE(diff->pass);
}

}  // namespace
}  // namespace gm
