// Findings of one trace device (docs/findings.md has each kind's threshold and why).
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "findings/findings.h"
#include "meter/meter.h"

namespace gm::findings {
namespace {

constexpr double kHoursPerMonth = 730;

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
void price(Finding& f, const trace::DeviceAnalysis& d, std::optional<MicroUsd> price_micros,
           std::int64_t steps) {
  if (!price_micros) return;
  f.cost_nano_usd = gpu_ns_cost_pico_usd(*price_micros, f.at_stake_ns) / 1000;
  if (steps > 0)
    f.nano_usd_per_1k_steps = gpu_ns_cost_pico_usd(*price_micros, f.at_stake_ns * 1000 / steps) / 1000;
  if (d.window_ns > 0) {
    // share of the window × price × 730 h, in integers: micros/h × 730 h × 1000 nano/micro × part / window.
    const Int128 n =
        static_cast<Int128>(*price_micros) * static_cast<Int128>(kHoursPerMonth) * 1000 * f.at_stake_ns;
    f.nano_usd_per_month = static_cast<std::int64_t>(n / d.window_ns);
  }
}

std::int64_t profiler_steps(const trace::DeviceAnalysis& d) {
  std::int64_t n = 0;
  for (const auto& s : d.steps) n += s.name.rfind("ProfilerStep", 0) == 0 ? 1 : 0;
  return n;
}

/// Kernel family: the kernel's name without template arguments and parameters ("implicit_convolve_sgemm").
std::string family(const std::string& kernel_name) {
  return trace::short_name(kernel_name, 200);
}

}  // namespace

const char* severity_name(Severity severity) {
  switch (severity) {
    case Severity::info:
      return "info";
    case Severity::low:
      return "low";
    case Severity::medium:
      return "medium";
    case Severity::high:
      return "high";
  }
  return "info";
}

std::vector<Finding> for_trace_device(const trace::DeviceAnalysis& d, std::optional<MicroUsd> price_micros) {
  std::vector<Finding> out;
  if (d.window_ns <= 0) return out;
  const std::int64_t steps = profiler_steps(d);

  // Input-bound: the GPU idles while the next work has not even been launched by the host.
  const double host_wait = share(d.idle_host_wait_ns, d.window_ns);
  if (host_wait >= 0.10) {
    Finding f;
    f.kind = "input_bound";
    f.severity = severity_of(host_wait);
    f.at_stake_ns = d.idle_host_wait_ns;
    f.summary = fmt::format(
        "the GPU waited on the host for {:.0f}% of the window: the next kernel was launched "
        "only after the GPU had run out of work",
        100 * host_wait);
    f.action =
        "feed the GPU faster: raise DataLoader num_workers, set pin_memory=True and persistent_workers=True, "
        "move CPU preprocessing out of the training step";
    f.evidence.push_back({"host_wait_idle_ns", d.idle_host_wait_ns});
    f.evidence.push_back({"window_ns", d.window_ns});
    f.evidence.push_back({"host_wait_share", host_wait});
    if (!d.idle_cpu_ops.empty()) f.evidence.push_back({"host_busy_with", d.idle_cpu_ops.front().name});
    price(f, d, price_micros, steps);
    out.push_back(std::move(f));
  }

  // Synchronisations on the critical path: the GPU ran out of work while the host was blocked in a sync
  // call, and idled until the host woke up and launched again. Part of the host wait above when both show.
  const double after_sync = share(d.idle_after_sync_ns, d.window_ns);
  if (after_sync >= 0.05) {
    Finding f;
    f.kind = "sync_stall";
    f.severity = severity_of(after_sync);
    f.at_stake_ns = d.idle_after_sync_ns;
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
    f.evidence.push_back({"idle_after_sync_ns", d.idle_after_sync_ns});
    f.evidence.push_back({"sync_gap_count", d.sync_gap_count});
    f.evidence.push_back({"window_ns", d.window_ns});
    price(f, d, price_micros, steps);
    out.push_back(std::move(f));
  }

  // Launch-bound: idle that is not host wait, with almost nothing queued and kernels shorter than their
  // launch delay: the CPU cannot launch small kernels as fast as the GPU runs them.
  const double other_idle = share(d.idle_other_ns, d.window_ns);
  const double mean_kernel_ns =
      d.activity_count > 0 ? static_cast<double>(d.kernel_ns) / static_cast<double>(d.activity_count) : 0;
  if (other_idle >= 0.10 && d.queue_depth.count > 0 && d.queue_depth.p50 <= 1 &&
      d.launch_delay_ns.count > 0 && mean_kernel_ns < static_cast<double>(d.launch_delay_ns.p50)) {
    Finding f;
    f.kind = "launch_bound";
    f.severity = severity_of(other_idle);
    f.at_stake_ns = d.idle_other_ns;
    f.summary = fmt::format(
        "{:.0f}% of the window idle between short kernels (mean {:.1f} µs, launched {:.1f} µs "
        "after their call, median queue depth {})",
        100 * other_idle, mean_kernel_ns / 1e3, static_cast<double>(d.launch_delay_ns.p50) / 1e3,
        d.queue_depth.p50);
    f.action =
        "launch fewer, larger kernels: CUDA graphs or torch.compile(mode=\"reduce-overhead\"), fuse small "
        "ops, or a larger batch";
    f.evidence.push_back({"idle_other_ns", d.idle_other_ns});
    f.evidence.push_back({"mean_kernel_ns", mean_kernel_ns});
    f.evidence.push_back({"launch_delay_p50_ns", d.launch_delay_ns.p50});
    f.evidence.push_back({"queue_depth_p50", d.queue_depth.p50});
    price(f, d, price_micros, steps);
    out.push_back(std::move(f));
  }

  // Communication not hidden behind compute.
  const double exposed = share(d.communication_ns, d.window_ns);
  if (exposed >= 0.05) {
    Finding f;
    f.kind = "communication_exposed";
    f.severity = severity_of(exposed);
    f.at_stake_ns = d.communication_ns;
    f.summary = fmt::format(
        "collectives ran without compute beside them for {:.0f}% of the window ({:.0f}% of "
        "communication time overlapped)",
        100 * exposed, 100 * share(d.overlap_ns, d.overlap_ns + d.communication_ns));
    f.action =
        "overlap communication with compute: tune DDP bucket_cap_mb and gradient_as_bucket_view, FSDP "
        "backward/forward prefetch, or fewer, larger all-reduces";
    f.evidence.push_back({"communication_exposed_ns", d.communication_ns});
    f.evidence.push_back({"communication_overlapped_ns", d.overlap_ns});
    price(f, d, price_micros, steps);
    out.push_back(std::move(f));
  }

  // Pageable host<->device copies (Kineto names them "Memcpy HtoD (Pageable -> Device)").
  std::int64_t pageable_ns = 0, pageable_count = 0;
  for (const auto& k : d.kernels)
    if (k.name.find("Pageable") != std::string::npos) {
      pageable_ns += k.attributed_ns;
      pageable_count += k.count;
    }
  if (pageable_count > 0 && share(pageable_ns, d.busy_ns) >= 0.01) {
    Finding f;
    f.kind = "pageable_copies";
    f.severity = std::max(Severity::low, severity_of(share(pageable_ns, d.window_ns)));
    f.at_stake_ns = pageable_ns;
    f.summary = fmt::format("{} copies between pageable host memory and the GPU took {:.1f}% of busy time",
                            pageable_count, 100 * share(pageable_ns, d.busy_ns));
    f.action = "pin host memory: DataLoader(pin_memory=True) and tensor.to(device, non_blocking=True)";
    f.evidence.push_back({"pageable_copy_ns", pageable_ns});
    f.evidence.push_back({"pageable_copies", pageable_count});
    price(f, d, price_micros, steps);
    out.push_back(std::move(f));
  }

  // One kernel family holding most of the GPU's work: where optimisation pays first.
  std::map<std::string, std::int64_t> families;
  for (const auto& k : d.kernels) families[family(k.name)] += k.attributed_ns;
  auto top = std::max_element(families.begin(), families.end(),
                              [](const auto& a, const auto& b) { return a.second < b.second; });
  if (top != families.end() && share(top->second, d.busy_ns) >= 0.30) {
    Finding f;
    f.kind = "dominant_kernel_family";
    f.severity = Severity::info;
    f.at_stake_ns = top->second;
    f.summary = fmt::format("one kernel family, {}, holds {:.0f}% of the GPU's busy time", top->first,
                            100 * share(top->second, d.busy_ns));
    f.action =
        "optimise there first: for GEMMs and convolutions use bf16/TF32 tensor cores and channels_last; "
        "for elementwise kernels fuse them (torch.compile)";
    f.evidence.push_back({"kernel_family", top->first});
    f.evidence.push_back({"family_ns", top->second});
    f.evidence.push_back({"busy_ns", d.busy_ns});
    price(f, d, price_micros, steps);
    out.push_back(std::move(f));
  }
  std::stable_sort(out.begin(), out.end(), [](const Finding& a, const Finding& b) {
    if (a.severity != b.severity) return a.severity > b.severity;
    return a.at_stake_ns > b.at_stake_ns;
  });
  return out;
}

}  // namespace gm::findings
