// Findings of one trace device (docs/findings.md has each kind's threshold and why).
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "catalog/catalog.h"
#include "findings/findings.h"
#include "meter/meter.h"
#include "util/enum_text.h"

namespace gm::findings {
namespace {

double share(std::int64_t part, std::int64_t whole) {
  return whole > 0 ? static_cast<double>(part) / static_cast<double>(whole) : 0.0;
}

Severity severity_of(double window_share) {
  if (window_share >= 0.30) return Severity::high;
  if (window_share >= 0.15) return Severity::medium;
  if (window_share >= 0.05) return Severity::low;
  return Severity::info;
}

/// Fills the dollars of `f` from its GPU time: over the window, per 1k profiler steps, per month at the same
/// share of a GPU's time.
void price(Finding& f, std::int64_t window_ns, std::optional<MicroUsd> price_micros, std::int64_t steps) {
  if (!price_micros) return;
  f.cost_nano_usd = meter::gpu_ns_cost_nano_usd(*price_micros, f.at_stake_ns);
  if (steps > 0)
    f.nano_usd_per_1k_steps = meter::gpu_ns_cost_nano_usd(*price_micros, f.at_stake_ns * 1000 / steps);
  if (auto month = meter::nano_usd_per_month_of_share(*price_micros, f.at_stake_ns, window_ns))
    f.nano_usd_per_month = month;
}

std::int64_t profiler_steps(const std::vector<trace::Bucket>& steps) {
  std::int64_t n = 0;
  for (const auto& s : steps) n += s.name.rfind("ProfilerStep", 0) == 0 ? 1 : 0;
  return n;
}

/// The findings of one device (or host side), each priced over the same window, price and steps as it is
/// added.
class Found {
 public:
  Found(std::int64_t window_ns, std::optional<MicroUsd> price_micros, std::int64_t steps)
      : window_ns_(window_ns), price_micros_(price_micros), steps_(steps) {}

  /// A new priced finding; the caller fills its summary, action and evidence.
  Finding& add(const char* kind, Severity severity, std::int64_t at_stake_ns) {
    Finding& f = out_.emplace_back();
    f.kind = kind;
    f.severity = severity;
    f.at_stake_ns = at_stake_ns;
    price(f, window_ns_, price_micros_, steps_);
    return f;
  }

  /// The findings, largest at stake first (by severity, then GPU time).
  std::vector<Finding> take() {
    std::stable_sort(out_.begin(), out_.end(), [](const Finding& a, const Finding& b) {
      if (a.severity != b.severity) return a.severity > b.severity;
      return a.at_stake_ns > b.at_stake_ns;
    });
    return std::move(out_);
  }

 private:
  std::int64_t window_ns_;
  std::optional<MicroUsd> price_micros_;
  std::int64_t steps_;
  std::vector<Finding> out_;
};

/// `unfused_attention` from the chains' time `chain_ns` (GPU kernels or CPU operators), of which `matmul_ns`
/// in the two matmuls: a fused kernel is estimated to take the matmuls' time, so the rest is at stake.
void unfused_attention(Found& found, const trace::AttentionFigures& a, std::int64_t chain_ns,
                       std::int64_t matmul_ns, std::int64_t busy_ns, std::int64_t window_ns,
                       const char* where) {
  if (a.chains == 0 || chain_ns <= 0) return;
  const std::int64_t at_stake = std::max<std::int64_t>(0, chain_ns - matmul_ns);
  if (share(at_stake, busy_ns) < 0.01) return;
  Finding& f = found.add("unfused_attention", severity_of(share(at_stake, window_ns)), at_stake);
  f.summary = fmt::format(
      "attention written as separate kernels: {} chains of {} took {:.1f}% of the {}'s busy time; a fused "
      "kernel would need about the matmuls' time alone, {:.1f}% of the window is at stake",
      a.chains, a.pattern, 100 * share(chain_ns, busy_ns), where, 100 * share(at_stake, window_ns));
  f.action =
      "call torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True) instead of "
      "q @ k.transpose → softmax → @ v (PyTorch 2: FlashAttention / memory-efficient kernels; or "
      "attn_implementation=\"sdpa\" in Hugging Face models)";
  f.evidence = {{"chains", a.chains},
                {"pattern", a.pattern},
                {"chain_ns", chain_ns},
                {"matmul_ns", matmul_ns},
                {"fused_estimate_ns", matmul_ns}};
  f.evidence.push_back(
      {"estimate", std::string("a fused kernel takes the two matmuls' time: the softmax, scaling, "
                               "masking and the round trips of the score matrix go away")});
  if (a.chains_in_fused_steps > 0) f.evidence.push_back({"chains_in_fused_steps", a.chains_in_fused_steps});
}

/// Kernel family: the kernel's name without template arguments and parameters ("implicit_convolve_sgemm").
std::string family(const std::string& kernel_name) {
  return trace::short_name(kernel_name, 200);
}

/// What mixed precision would buy on a device: the catalog's peak tensor-core vs fp32 TFLOPS ratio.
struct TensorCores {
  bool ampere_plus = false;  ///< bf16 (Ampere and later) rather than fp16 + GradScaler (Volta, Turing)
  double speedup = 0;        ///< assumed speed-up of the fp32 GEMMs / convolutions
  std::string basis;         ///< where the speed-up comes from, in words
};

bool architecture_in(const catalog::GpuSpec* spec, std::initializer_list<std::string_view> names) {
  if (spec == nullptr) return false;
  return std::any_of(names.begin(), names.end(), [&](std::string_view n) { return spec->architecture == n; });
}

/// Tensor cores of the device (Volta and later, from deviceProperties computeMajor or the catalog); nullopt
/// when the device has none or is not known to have them.
std::optional<TensorCores> tensor_cores(const trace::DeviceAnalysis& d, const catalog::Catalog* catalog) {
  const catalog::GpuSpec* spec =
      catalog != nullptr && d.gpu_name ? catalog->gpu_for_device_name(*d.gpu_name) : nullptr;
  // The trace's own computeMajor wins over the catalog's architecture.
  const bool has_tensor_cores =
      d.compute_major
          ? *d.compute_major >= 7
          : architecture_in(spec, {"Volta", "Turing", "Ampere", "Ada Lovelace", "Hopper", "Blackwell"});
  if (!has_tensor_cores) return std::nullopt;
  TensorCores tc;
  tc.ampere_plus = d.compute_major ? *d.compute_major >= 8
                                   : architecture_in(spec, {"Ampere", "Ada Lovelace", "Hopper", "Blackwell"});
  if (spec != nullptr && spec->fp32_tflops && *spec->fp32_tflops > 0) {
    std::optional<double> tensor = tc.ampere_plus ? spec->bf16_dense_tflops : spec->fp16_dense_tflops;
    const char* kind = tc.ampere_plus ? "bf16" : "fp16";
    if (!tensor && tc.ampere_plus) {
      tensor = spec->fp16_dense_tflops;
      kind = "fp16";
    }
    if (tensor && *tensor > *spec->fp32_tflops) {
      tc.speedup = *tensor / *spec->fp32_tflops;
      tc.basis = fmt::format(
          "{}: {} dense tensor-core {:g} TFLOPS / fp32 {:g} TFLOPS (catalog peak figures; an upper bound, "
          "memory-bound shapes gain less)",
          spec->id, kind, *tensor, *spec->fp32_tflops);
      return tc;
    }
  }
  tc.speedup = 2.0;
  tc.basis = "assumed 2x: the catalog has no fp32 and tensor-core figures for this GPU";
  return tc;
}

}  // namespace

constexpr util::EnumText<Severity> kSeverities[] = {
    {Severity::info, "info"}, {Severity::low, "low"}, {Severity::medium, "medium"}, {Severity::high, "high"}};

const char* severity_name(Severity severity) {
  return util::enum_text(kSeverities, severity, "info");
}

std::vector<Finding> for_trace_device(const trace::DeviceAnalysis& d, std::optional<MicroUsd> price_micros,
                                      const catalog::Catalog* catalog) {
  if (d.window_ns <= 0) return {};
  Found found(d.window_ns, price_micros, profiler_steps(d.steps));

  // Host wait, by what the host was doing in each gap (docs/trace.md "Idle gaps"). Input-bound: the GPU idles
  // while the host waits for data (a DataLoader iteration) or runs Python outside any operator at a step's
  // start or end.
  const double input_wait = share(d.idle_input_ns, d.window_ns);
  if (input_wait >= 0.10) {
    Finding& f = found.add("input_bound", severity_of(input_wait), d.idle_input_ns);
    f.summary = fmt::format(
        "the GPU waited for input for {:.0f}% of the window: the host was {} when the GPU ran out of work",
        100 * input_wait,
        d.idle_input_dataloader_ns * 2 >= d.idle_input_ns
            ? "inside a DataLoader iteration"
            : "outside any operator at the start or end of a step (data fetching, Python between steps)");
    f.action =
        "feed the GPU faster: raise DataLoader num_workers, set pin_memory=True and persistent_workers=True, "
        "move CPU preprocessing out of the training step";
    f.evidence = {{"input_wait_idle_ns", d.idle_input_ns},
                  {"dataloader_idle_ns", d.idle_input_dataloader_ns},
                  {"outside_operators_idle_ns", d.idle_input_ns - d.idle_input_dataloader_ns},
                  {"window_ns", d.window_ns},
                  {"input_wait_share", input_wait}};
    if (!d.input_frames.empty()) f.evidence.push_back({"dataloader_frame", d.input_frames.front().name});
    if (!d.idle_cpu_ops.empty()) f.evidence.push_back({"host_busy_with", d.idle_cpu_ops.front().name});
  }

  // Dispatch-bound: the GPU idles while the host is launching operators (inside them, or in the Python
  // between the operators of a step): the host issues work slower than the GPU runs it.
  const double dispatch_wait = share(d.idle_dispatch_ns, d.window_ns);
  if (dispatch_wait >= 0.10) {
    Finding& f = found.add("dispatch_bound", severity_of(dispatch_wait), d.idle_dispatch_ns);
    const double mean_kernel_us =
        d.activity_count > 0 ? static_cast<double>(d.kernel_ns) / static_cast<double>(d.activity_count) / 1e3
                             : 0;
    f.summary = fmt::format(
        "the GPU waited {:.0f}% of the window for the host to launch its next work ({:.0f}% of it inside "
        "ops, the rest in the Python between them); {} activities of {:.1f} µs on average",
        100 * dispatch_wait, 100 * share(d.idle_dispatch_in_ops_ns, d.idle_dispatch_ns), d.activity_count,
        mean_kernel_us);
    // One long gap holding most of it is the host computing inside one operator (first-call initialisation,
    // cuDNN autotuning, a CPU fallback), not the per-launch overhead that graphs and compilation remove.
    const bool one_gap = d.longest_dispatch_gap_ns * 2 > d.idle_dispatch_ns;
    if (one_gap)
      f.summary = fmt::format(
          "the GPU waited {:.0f}% of the window for the host to launch its next work, {:.0f}% of that in one "
          "{:.1f} ms gap while the host was inside {}: host work inside one op (first-call "
          "initialisation, cuDNN autotuning, a CPU fallback), not per-launch overhead",
          100 * dispatch_wait, 100 * share(d.longest_dispatch_gap_ns, d.idle_dispatch_ns),
          static_cast<double>(d.longest_dispatch_gap_ns) / 1e6,
          d.longest_dispatch_gap_op.empty() ? std::string("no recorded op") : d.longest_dispatch_gap_op);
    f.action =
        one_gap
            ? "see what that op does on the host: profile steady-state steps (a longer warm-up in the "
              "profiler schedule) when it is a first call or autotuning (torch.backends.cudnn.benchmark); "
              "move "
              "host-side computation out of the step or onto the GPU"
        : d.graph_launches > 0
            ? "the step already replays CUDA graphs; the GPU waits on the host around the graph launches "
              "(the "
              "compiled region's Python, guards, input copies): capture more of the step in one graph (fewer "
              "graph breaks: torch._dynamo.explain), keep inputs in static buffers, or raise the batch size "
              "so "
              "each replay does more work"
            : "launch less from Python: capture the step in CUDA graphs "
              "(torch.compile(mode=\"reduce-overhead\") "
              "or torch.cuda.graphs), compile it with torch.compile to get fewer, larger (fused) kernels, "
              "use "
              "fused optimizers (foreach=True / fused=True), or raise the batch size so each kernel does "
              "more "
              "work";
    f.evidence = {{"dispatch_idle_ns", d.idle_dispatch_ns},
                  {"inside_operators_idle_ns", d.idle_dispatch_in_ops_ns},
                  {"between_operators_idle_ns", d.idle_dispatch_ns - d.idle_dispatch_in_ops_ns},
                  {"window_ns", d.window_ns},
                  {"dispatch_share", dispatch_wait},
                  {"activities", d.activity_count}};
    for (std::size_t k = 0; k < d.dispatch_cpu_ops.size() && k < 3; ++k)
      f.evidence.push_back({fmt::format("host_op_{}", k + 1), d.dispatch_cpu_ops[k].name});
    f.evidence.push_back({"longest_gap_ns", d.longest_dispatch_gap_ns});
    if (!d.longest_dispatch_gap_op.empty())
      f.evidence.push_back({"longest_gap_op", d.longest_dispatch_gap_op});
    if (d.graph_launches > 0) f.evidence.push_back({"graph_launches", d.graph_launches});
  }

  // Synchronisations on the critical path: the GPU ran out of work while the host was blocked in a sync
  // call, and idled until the host woke up and launched again. Part of the host wait above when both show.
  const double after_sync = share(d.idle_after_sync_ns, d.window_ns);
  if (after_sync >= 0.05) {
    Finding& f = found.add("sync_stall", severity_of(after_sync), d.idle_after_sync_ns);
    f.summary = fmt::format(
        "{} idle gaps ({:.0f}% of the window) began while the host was blocked in a synchronisation "
        "(cudaDeviceSynchronize / cudaStreamSynchronize / a synchronous copy): the GPU waited for the host "
        "to "
        "wake up and launch again",
        d.sync_gap_count, 100 * after_sync);
    f.action =
        "take synchronisations off the step's critical path: no tensor.item(), .cpu(), .tolist() or printing "
        "of "
        "CUDA tensors inside the step (log every N steps), no torch.cuda.synchronize() outside timing code, "
        "non_blocking=True copies from pinned memory";
    f.evidence = {{"idle_after_sync_ns", d.idle_after_sync_ns},
                  {"sync_gap_count", d.sync_gap_count},
                  {"window_ns", d.window_ns}};
  }

  // Launch-bound: idle that is not host wait, with almost nothing queued and kernels shorter than their
  // launch delay: the CPU cannot launch small kernels as fast as the GPU runs them.
  // Idle between the kernels of one CUDA graph replay is the graph's own: not a launch problem.
  const std::int64_t launch_idle_ns = d.idle_other_ns - d.idle_in_graph_ns;
  const double other_idle = share(launch_idle_ns, d.window_ns);
  const double mean_kernel_ns =
      d.activity_count > 0 ? static_cast<double>(d.kernel_ns) / static_cast<double>(d.activity_count) : 0;
  if (other_idle >= 0.10 && d.queue_depth.count > 0 && d.queue_depth.p50 <= 1 &&
      d.launch_delay_ns.count > 0 && mean_kernel_ns < static_cast<double>(d.launch_delay_ns.p50)) {
    Finding& f = found.add("launch_bound", severity_of(other_idle), launch_idle_ns);
    f.summary = fmt::format(
        "{:.0f}% of the window idle between short kernels (mean {:.1f} µs, launched {:.1f} µs "
        "after their call, median queue depth {})",
        100 * other_idle, mean_kernel_ns / 1e3, static_cast<double>(d.launch_delay_ns.p50) / 1e3,
        d.queue_depth.p50);
    f.action =
        "launch fewer, larger kernels: CUDA graphs or torch.compile(mode=\"reduce-overhead\"), fuse small "
        "ops, or a larger batch";
    f.evidence = {{"idle_other_ns", launch_idle_ns},
                  {"mean_kernel_ns", mean_kernel_ns},
                  {"launch_delay_p50_ns", d.launch_delay_ns.p50},
                  {"queue_depth_p50", d.queue_depth.p50}};
  }

  // Communication not hidden behind compute.
  const double exposed = share(d.communication_ns, d.window_ns);
  if (exposed >= 0.05) {
    Finding& f = found.add("communication_exposed", severity_of(exposed), d.communication_ns);
    f.summary = fmt::format(
        "collectives ran without compute beside them for {:.0f}% of the window ({:.0f}% of "
        "communication time overlapped)",
        100 * exposed, 100 * share(d.overlap_ns, d.overlap_ns + d.communication_ns));
    f.action =
        "overlap communication with compute: tune DDP bucket_cap_mb and gradient_as_bucket_view, FSDP "
        "backward/forward prefetch, or fewer, larger all-reduces";
    f.evidence = {{"communication_exposed_ns", d.communication_ns},
                  {"communication_overlapped_ns", d.overlap_ns}};
  }

  // Pageable host<->device copies (Kineto names them "Memcpy HtoD (Pageable -> Device)").
  std::int64_t pageable_ns = 0, pageable_count = 0;
  for (const auto& k : d.kernels)
    if (k.name.find("Pageable") != std::string::npos) {
      pageable_ns += k.attributed_ns;
      pageable_count += k.count;
    }
  if (pageable_count > 0 && share(pageable_ns, d.busy_ns) >= 0.01) {
    Finding& f =
        found.add("pageable_copies", std::max(Severity::low, severity_of(share(pageable_ns, d.window_ns))),
                  pageable_ns);
    f.summary = fmt::format("{} copies between pageable host memory and the GPU took {:.1f}% of busy time",
                            pageable_count, 100 * share(pageable_ns, d.busy_ns));
    f.action = "pin host memory: DataLoader(pin_memory=True) and tensor.to(device, non_blocking=True)";
    f.evidence.push_back({"pageable_copy_ns", pageable_ns});
    f.evidence.push_back({"pageable_copies", pageable_count});
  }

  // GEMMs and convolutions in fp32 on the CUDA cores of a GPU that has tensor cores (every such kernel of the
  // window, those launched before it included; docs/findings.md `fp32_math`).
  if (const auto tc = tensor_cores(d, catalog)) {
    const trace::MatrixMath& m = d.matrix_math;
    const std::int64_t fp32_ns = m.fp32_ns;
    if (m.fp32_count > 0 && share(fp32_ns, d.busy_ns) >= 0.10) {
      const auto at_stake =
          static_cast<std::int64_t>(static_cast<double>(fp32_ns) * (1.0 - 1.0 / tc->speedup));
      Finding& f = found.add("fp32_math", severity_of(share(at_stake, d.window_ns)), at_stake);
      f.summary = fmt::format(
          "{:.0f}% of the GPU's busy time is fp32 GEMMs and convolutions on the CUDA cores of a GPU with "
          "tensor cores ({} kernels, e.g. {}); at an assumed {:.1f}x speed-up, {:.0f}% of the window is "
          "at stake",
          100 * share(fp32_ns, d.busy_ns), m.fp32_count, family(m.largest_fp32_kernel), tc->speedup,
          100 * share(f.at_stake_ns, d.window_ns));
      f.action =
          tc->ampere_plus
              ? "train in mixed precision: torch.autocast(\"cuda\", dtype=torch.bfloat16) around the "
                "forward pass and loss; for what stays fp32 set torch.backends.cuda.matmul.allow_tf32 = "
                "True (and torch.backends.cudnn.allow_tf32); convolutions: "
                "model.to(memory_format=torch.channels_last)"
              : "train in mixed precision: torch.autocast(\"cuda\", dtype=torch.float16) with "
                "torch.cuda.amp.GradScaler (this GPU has fp16 tensor cores, no bf16 or TF32); "
                "convolutions: model.to(memory_format=torch.channels_last)";
      f.evidence = {{"fp32_matrix_ns", fp32_ns},
                    {"fp32_matrix_kernel_ns", m.fp32_kernel_ns},
                    {"fp32_matrix_kernels", m.fp32_count},
                    {"fp32_before_window_ns", m.fp32_before_window_ns},
                    {"tensor_core_matrix_ns", m.tensor_core_ns},
                    {"largest_fp32_kernel", family(m.largest_fp32_kernel)}};
      f.evidence.push_back({"precision_from",
                            std::string(m.from_dtypes_count > 0 ? "operator input dtypes (record_shapes), "
                                                                  "kernel-family table without them"
                                                                : "kernel-family table (no record_shapes)")});
      f.evidence.push_back({"speedup_assumed", tc->speedup});
      f.evidence.push_back({"speedup_basis", tc->basis});
      if (d.gpu_name) f.evidence.push_back({"gpu", *d.gpu_name});
      if (d.compute_major) f.evidence.push_back({"compute_major", std::int64_t{*d.compute_major}});
    }
  }

  // Attention as separate matmul, softmax and matmul kernels where a fused kernel would do.
  unfused_attention(found, d.attention, d.attention.kernel_ns, d.attention.matmul_kernel_ns, d.busy_ns,
                    d.window_ns, "GPU");

  // One kernel family holding most of the GPU's work: where optimisation pays first.
  std::map<std::string, std::int64_t> families;
  for (const auto& k : d.kernels) families[family(k.name)] += k.attributed_ns;
  auto top = std::max_element(families.begin(), families.end(),
                              [](const auto& a, const auto& b) { return a.second < b.second; });
  if (top != families.end() && share(top->second, d.busy_ns) >= 0.30) {
    Finding& f = found.add("dominant_kernel_family", Severity::info, top->second);
    f.summary = fmt::format("one kernel family, {}, holds {:.0f}% of the GPU's busy time", top->first,
                            100 * share(top->second, d.busy_ns));
    f.action =
        "optimise there first: for GEMMs and convolutions use bf16/TF32 tensor cores and channels_last; "
        "for elementwise kernels fuse them (torch.compile)";
    f.evidence = {{"kernel_family", top->first}, {"family_ns", top->second}, {"busy_ns", d.busy_ns}};
  }
  return found.take();
}

std::vector<Finding> for_trace_host(const trace::HostAnalysis& h, std::optional<MicroUsd> price_micros) {
  Found found(h.window_ns, price_micros, profiler_steps(h.steps));
  std::int64_t busy_ns = 0;  // the CPU operators' time: Σ self time
  for (const auto& op : h.operators) busy_ns += op.self_ns;
  unfused_attention(found, h.attention, h.attention.host_ns, h.attention.host_matmul_ns, busy_ns, h.window_ns,
                    "host");
  return found.take();
}

}  // namespace gm::findings
