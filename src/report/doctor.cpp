#include "report/doctor.h"

#include <fmt/format.h>
#include <fmt/printf.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "catalog/catalog.h"
#include "cloud/cloud.h"
#include "kubelet/pod_resources.h"
#include "sys/owner.h"
#include "sys/pid_namespace.h"
#include "sys/proc.h"
#include "util/clock.h"
#include "util/time.h"

namespace gm::report {

namespace {

/// Appends printf-style text to `out`.
template <class... Args>
void appendf(std::string& out, const char* format, const Args&... args) {
  out += fmt::sprintf(format, args...);
}

const char* yes_no(bool b) {
  return b ? "yes" : "no";
}

}  // namespace

std::string doctor_device(gpu::GpuBackend& backend, const gpu::DeviceInfo& info,
                          const std::string& dev_root) {
  std::string text;
  const gpu::Capabilities& caps = backend.capabilities(info.index);
  gpu::DeviceSample s = backend.sample(info.index);
  appendf(text, "\nGPU %u: %s\n", info.index, info.name.empty() ? "(name unavailable)" : info.name.c_str());
  appendf(text, "  uuid            %s\n", info.uuid.empty() ? "-" : info.uuid.c_str());
  appendf(text, "  pci bus id      %s\n", info.pci_bus_id.empty() ? "-" : info.pci_bus_id.c_str());
  appendf(text, "  architecture    %s\n", info.architecture.value_or("unknown").c_str());
  if (info.minor_number) {
    const std::string path = sys::gpu_device_path(dev_root, *info.minor_number);
    appendf(text, "  device file     %s (minor %u)%s\n", path.c_str(), *info.minor_number,
            sys::gpu_device_file_present(dev_root, *info.minor_number) ? "" : " absent here");
  } else {
    appendf(
        text,
        "  device file     unknown (nvmlDeviceGetMinorNumber not supported): jobs are matched by PID only\n");
  }
  appendf(text, "  state           %s%s\n", to_string(s.state),
          s.error.empty() ? "" : (" (" + s.error + ")").c_str());
  appendf(text, "  utilization     %s\n", yes_no(caps.utilization));
  appendf(text, "  memory          %s\n", yes_no(caps.memory));
  appendf(text, "  power           %s\n", yes_no(caps.power));
  appendf(text, "  energy counter  %s\n", yes_no(caps.energy_counter));
  appendf(text, "  temperature     %s\n", yes_no(caps.temperature));
  appendf(text, "  clocks          %s\n", yes_no(caps.clocks));
  appendf(text, "  processes       %s%s\n", yes_no(caps.processes),
          caps.process_api.empty() ? "" : (" (" + caps.process_api + ")").c_str());
  appendf(text, "  process SM util %s\n", yes_no(caps.process_utilization));
  appendf(text, "  GPM activity    %s\n",
          caps.gpm ? "yes (SM, tensor-core, FP pipe and DRAM activity)" : "no");
  gpu::EnergyMethod method = gpu::energy_method(caps);
  const char* method_text = method == gpu::EnergyMethod::counter
                                ? "counter (nvmlDeviceGetTotalEnergyConsumption)"
                            : method == gpu::EnergyMethod::power_integration
                                ? "power_integration (trapezoid over power samples; no energy counter)"
                                : "none (neither energy counter nor power readings)";
  appendf(text, "  energy method   %s\n", method_text);
  if (!info.mig_enabled) {
    appendf(text, "  MIG             not supported\n");
  } else {
    appendf(text, "  MIG             %s", *info.mig_enabled ? "enabled" : "disabled");
    if (*info.mig_enabled)
      appendf(text, ", %zu instance(s); per-process utilization is not available in MIG mode",
              info.mig_instances.size());
    appendf(text, "\n");
    for (const auto& m : info.mig_instances) {
      appendf(text, "    MIG %u  %s  GPU instance %u", m.index, m.uuid.c_str(), m.gpu_instance_id);
      if (m.slice_count && m.board_slices)
        appendf(text, "  %u of %u slices", *m.slice_count, *m.board_slices);
      else
        appendf(text, "  slices unknown (priced by memory share)");
      appendf(text, "\n");
    }
  }
  bool permission_problem = false;
  for (const auto& n : caps.notes)
    permission_problem = permission_problem || n.find("NO_PERMISSION") != std::string::npos;
  appendf(text, "  permissions     %s\n",
          permission_problem ? "some queries need more privileges (see notes)" : "ok");
  for (const auto& n : caps.notes) appendf(text, "  note: %s\n", n.c_str());
  return text;
}

/// Whose PIDs NVML reports here (the driver's are the host's), the container markers, and whether the GPU
/// processes NVML lists resolve in this PID namespace now.
std::string doctor_pid_namespace(gpu::GpuBackend* backend, const std::string& proc_root) {
  std::string text;
  const sys::PidNamespaceFacts facts = sys::detect_pid_namespace();
  appendf(text, "\nPID namespace    %s\n", facts.describe().c_str());
  if (backend == nullptr) return text;
  const sys::ProcReader proc(proc_root);
  std::size_t listed = 0, unresolved = 0;
  for (const auto& info : backend->devices())
    for (const auto& p : backend->sample(info.index).processes) {
      ++listed;
      if (!proc.exists(p.pid)) ++unresolved;
    }
  if (listed == 0)
    appendf(text, "  GPU processes  none now\n");
  else if (unresolved == 0)
    appendf(text, "  GPU processes  %zu, every PID resolves here\n", listed);
  else
    appendf(text,
            "  GPU processes  %zu, %zu of them with PIDs that do not resolve here (another PID namespace's): "
            "`run`, `attach` and notebooks match a job by its open device files\n",
            listed, unresolved);
  return text;
}

std::string doctor_catalog() {
  std::string text;
  auto catalog = catalog::load_catalog(std::nullopt);
  if (!catalog) {
    appendf(text, "\ncatalog          NOT AVAILABLE: %s\n", catalog.error().message.c_str());
    return text;
  }
  std::string newest = catalog->newest_price_date();
  auto age = util::days_since_date(newest, util::system_clock().unix_ms());
  appendf(text, "\ncatalog          %zu GPUs, %zu offers; newest price %s%s\n", catalog->gpus().size(),
          catalog->offers().size(), newest.empty() ? "unknown" : newest.c_str(),
          age ? fmt::format(" ({} days old)", *age).c_str() : "");
  const auto fetched = catalog::existing_user_catalog_path();
  appendf(text, "  fetched prices %s\n",
          fetched ? fetched->c_str()
                  : fmt::format("none yet ({} after 'gpumeter prices update')", catalog::user_catalog_path())
                        .c_str());
  std::set<std::string> providers;
  for (const auto& o : catalog->offers()) providers.insert(o.provider);
  bool stale = false;
  for (const auto& p : providers) {
    const std::string date = catalog->newest_price_date(p);
    const auto days = util::days_since_date(date, util::system_clock().unix_ms());
    std::size_t n = 0, from_fetch = 0;
    for (const auto& o : catalog->offers())
      if (o.provider == p) {
        ++n;
        if (!o.fetched_at.empty()) ++from_fetch;
      }
    const bool old = days && *days > 30;
    stale = stale || old;
    appendf(text, "  %-14s %zu offers (%zu fetched), newest %s%s%s\n", p.c_str(), n, from_fetch,
            date.empty() ? "undated" : date.c_str(), days ? fmt::format(", {} days old", *days).c_str() : "",
            old ? "  WARNING: older than 30 days" : "");
  }
  if (stale)
    appendf(text,
            "  prices older than 30 days may no longer match your bill: run 'gpumeter prices update' "
            "(or enable gpumeter-prices-update.timer)\n");
  return text;
}

/// Whether the kubelet pod-resources socket answers (pod names and GPUs held by pods for agent and top).
std::string doctor_pod_resources(const std::string& socket_path) {
  std::string text;
  if (socket_path.empty()) return text;
  kubelet::KubeletPodResources source(socket_path);
  auto r = source.list();
  if (r) {
    appendf(text, "kubelet pod-resources  %s: reachable, %zu device assignment(s)\n", socket_path.c_str(),
            r->size());
  } else if (r.error().kind == ErrorKind::not_found) {
    appendf(text, "kubelet pod-resources  %s: absent (not a Kubernetes node, or not mounted)\n",
            socket_path.c_str());
  } else {
    appendf(text, "kubelet pod-resources  NOT REACHABLE: %s\n", r.error().message.c_str());
  }
  return text;
}

/// Which method attributes GPU processes to Slurm jobs on this node.
std::string doctor_slurm(const std::string& conf_path) {
  std::string text;
  const sys::SlurmAttribution a = sys::slurm_attribution(conf_path, ::geteuid() == 0);
  appendf(text, "Slurm jobs       %s: %s\n", to_string(a.method), a.detail.c_str());
  return text;
}

/// Whether each serving engine's metrics endpoint answers with counters gpumeter can read (one bounded
/// scrape).
std::string doctor_inference_endpoints(const std::vector<serving::InferenceEndpointSpec>& specs) {
  std::string text;
  for (const auto& spec : specs) {
    const serving::ScrapeOutcome out = serving::scrape_endpoint(spec, 2000);
    if (!out.reading) {
      appendf(text, "inference endpoint  %s: NOT USABLE: %s: %s\n", spec.display.c_str(), out.error.c_str(),
              out.detail.c_str());
      if (out.error == "http")
        if (auto why = serving::metrics_disabled_reason(spec, 2000))
          appendf(text, "inference endpoint  %s: %s\n", spec.display.c_str(), why->c_str());
      continue;
    }
    std::string models;
    for (const auto& [name, m] : out.reading->models) models += (models.empty() ? "" : ", ") + name;
    appendf(text, "inference endpoint  %s: %s, %zu model(s): %s\n", spec.display.c_str(),
            serving::to_string(out.reading->engine), out.reading->models.size(), models.c_str());
  }
  return text;
}

/// What the agent's --inference-discover would find now: the TCP ports this node's GPU processes listen on
/// (from `proc_root`), each probed once for a known engine's /metrics.
std::string doctor_inference_discovery(gpu::GpuBackend* backend, const std::string& proc_root) {
  std::string text;
  if (backend == nullptr) {
    appendf(text, "inference discovery  not possible: no GPU library, so no GPU process list\n");
    return text;
  }
  std::set<std::uint32_t> pids;
  for (const auto& info : backend->devices())
    for (const auto& p : backend->sample(info.index).processes) pids.insert(p.pid);
  if (pids.empty()) {
    appendf(text, "inference discovery  no GPU process on this node now: nothing to probe\n");
    return text;
  }
  const auto ports = serving::listening_ports(proc_root, pids);
  if (ports.empty()) {
    appendf(
        text,
        "inference discovery  %zu GPU process(es); none listens on a TCP port visible here (another network "
        "namespace, or no permission to read their fds): give the endpoint with --inference-endpoint\n",
        pids.size());
    return text;
  }
  std::string list;
  for (auto port : ports) list += (list.empty() ? "" : ",") + std::to_string(port);
  const serving::ProbeResult probe = serving::probe_engine_ports("127.0.0.1", ports, 2000);
  for (const auto& note : probe.notes) appendf(text, "inference discovery  %s\n", note.c_str());
  const auto& found = probe.found;
  if (!found) {
    appendf(text,
            "inference discovery  %zu GPU process(es) listen on port(s) %s; none answers /metrics as vLLM, "
            "SGLang, "
            "TGI or Triton\n",
            pids.size(), list.c_str());
    return text;
  }
  const serving::ScrapeOutcome out = serving::scrape_endpoint(*found, 2000);
  std::string models;
  if (out.reading)
    for (const auto& [name, m] : out.reading->models) models += (models.empty() ? "" : ", ") + name;
  appendf(text, "inference discovery  found %s at %s (GPU processes' ports: %s); model(s): %s\n",
          out.reading ? serving::to_string(out.reading->engine) : "an engine", found->display.c_str(),
          list.c_str(), models.empty() ? "none yet" : models.c_str());
  return text;
}

/// Whether preemption notices can be read here: the cloud the instance detector finds (or the one named), and
/// one bounded poll of its metadata service.
std::string doctor_preemption(const std::string& mode_text, const std::optional<std::string>& url_flag) {
  std::string text;
  auto mode = cloud::parse_preemption_mode(mode_text);
  const char* env = std::getenv("GPUMETER_METADATA_URL");
  auto base = cloud::metadata_base_url(url_flag, env ? std::optional<std::string>(env) : std::nullopt);
  if (!mode || !base) {
    appendf(text, "preemption notices  NOT USABLE: %s\n",
            (!mode ? mode.error() : base.error()).message.c_str());
    return text;
  }
  if (mode->off) {
    appendf(text, "preemption notices  off (--preemption off)\n");
    return text;
  }
  std::optional<cloud::CloudProvider> provider =
      mode->provider ? mode->provider : cloud::detect_cloud_provider();
  if (!provider) {
    appendf(text,
            "preemption notices  this machine is not an AWS, GCP or Azure VM (DMI): `run --preemption auto` "
            "stays "
            "off; name the provider with --preemption to watch anyway\n");
    return text;
  }
  auto client = cloud::make_http_metadata_client(*base, cloud::kMetadataTimeoutMs);
  cloud::NoticePoller poller(*provider, *client);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = poller.poll(util::system_clock().unix_ms());
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
  const std::string name(cloud::provider_name(*provider));
  if (!r) {
    appendf(text,
            "preemption notices  %s metadata service at %s: NOT USABLE (%s, after %lld ms): `run` goes on "
            "without notices, polling in the background (the job is never delayed)\n",
            name.c_str(), base->c_str(), r.error().message.c_str(), static_cast<long long>(ms));
    return text;
  }
  std::string notices;
  for (const auto& n : *r) notices += (notices.empty() ? "" : "; ") + n.detail;
  appendf(text, "preemption notices  %s metadata service at %s answers in %lld ms: %s\n", name.c_str(),
          base->c_str(), static_cast<long long>(ms), notices.empty() ? "no notice now" : notices.c_str());
  return text;
}

}  // namespace gm::report
