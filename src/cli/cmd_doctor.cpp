// gpumeter doctor: what works here (NVML, driver, per-device capabilities, energy method, MIG,
// permissions, catalog age).
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include "catalog/catalog.h"
#include "cli/agent_node.h"
#include "cli/cli.h"
#include "cli/common.h"
#include "cloud/cloud.h"
#include "gpu/gpu.h"
#include "kubelet/pod_resources.h"
#include "serving/serving.h"
#include "sys/owner.h"
#include "sys/pid_namespace.h"
#include "sys/proc.h"
#include "util/clock.h"

namespace gm::cli {
namespace {

const char* yes_no(bool b) { return b ? "yes" : "no"; }

void print_device(GpuBackend& backend, const DeviceInfo& info, const std::string& dev_root) {
  const Capabilities& caps = backend.capabilities(info.index);
  DeviceSample s = backend.sample(info.index);
  std::printf("\nGPU %u: %s\n", info.index, info.name.empty() ? "(name unavailable)" : info.name.c_str());
  std::printf("  uuid            %s\n", info.uuid.empty() ? "-" : info.uuid.c_str());
  std::printf("  pci bus id      %s\n", info.pci_bus_id.empty() ? "-" : info.pci_bus_id.c_str());
  std::printf("  architecture    %s\n", info.architecture.value_or("unknown").c_str());
  if (info.minor_number) {
    const std::string path = gpu_device_path(dev_root, *info.minor_number);
    std::printf("  device file     %s (minor %u)%s\n", path.c_str(), *info.minor_number,
                gpu_device_file_present(dev_root, *info.minor_number) ? "" : " absent here");
  } else {
    std::printf("  device file     unknown (nvmlDeviceGetMinorNumber not supported): jobs are matched by PID only\n");
  }
  std::printf("  state           %s%s\n", to_string(s.state), s.error.empty() ? "" : (" (" + s.error + ")").c_str());
  std::printf("  utilization     %s\n", yes_no(caps.utilization));
  std::printf("  memory          %s\n", yes_no(caps.memory));
  std::printf("  power           %s\n", yes_no(caps.power));
  std::printf("  energy counter  %s\n", yes_no(caps.energy_counter));
  std::printf("  temperature     %s\n", yes_no(caps.temperature));
  std::printf("  clocks          %s\n", yes_no(caps.clocks));
  std::printf("  processes       %s%s\n", yes_no(caps.processes),
              caps.process_api.empty() ? "" : (" (" + caps.process_api + ")").c_str());
  std::printf("  process SM util %s\n", yes_no(caps.process_utilization));
  std::printf("  GPM activity    %s\n", caps.gpm ? "yes (SM, tensor-core, FP pipe and DRAM activity)" : "no");
  EnergyMethod method = energy_method(caps);
  const char* method_text = method == EnergyMethod::counter ? "counter (nvmlDeviceGetTotalEnergyConsumption)"
                            : method == EnergyMethod::power_integration
                                ? "power_integration (trapezoid over power samples; no energy counter)"
                                : "none (neither energy counter nor power readings)";
  std::printf("  energy method   %s\n", method_text);
  if (!info.mig_enabled) {
    std::printf("  MIG             not supported\n");
  } else {
    std::printf("  MIG             %s", *info.mig_enabled ? "enabled" : "disabled");
    if (*info.mig_enabled) std::printf(", %zu instance(s); per-process utilization is not available in MIG mode", info.mig_instances.size());
    std::printf("\n");
    for (const auto& m : info.mig_instances) {
      std::printf("    MIG %u  %s  GPU instance %u", m.index, m.uuid.c_str(), m.gpu_instance_id);
      if (m.slice_count && m.board_slices) std::printf("  %u of %u slices", *m.slice_count, *m.board_slices);
      else std::printf("  slices unknown (priced by memory share)");
      std::printf("\n");
    }
  }
  bool permission_problem = false;
  for (const auto& n : caps.notes) permission_problem = permission_problem || n.find("NO_PERMISSION") != std::string::npos;
  std::printf("  permissions     %s\n", permission_problem ? "some queries need more privileges (see notes)" : "ok");
  for (const auto& n : caps.notes) std::printf("  note: %s\n", n.c_str());
}

/// Whose PIDs NVML reports here (the driver's are the host's), the container markers, and whether the GPU
/// processes NVML lists resolve in this PID namespace now.
void print_pid_namespace(GpuBackend* backend, const std::string& proc_root) {
  const PidNamespaceFacts facts = detect_pid_namespace();
  std::printf("\nPID namespace    %s\n", facts.describe().c_str());
  if (backend == nullptr) return;
  const ProcReader proc(proc_root);
  std::size_t listed = 0, unresolved = 0;
  for (const auto& info : backend->devices())
    for (const auto& p : backend->sample(info.index).processes) {
      ++listed;
      if (!proc.exists(p.pid)) ++unresolved;
    }
  if (listed == 0)
    std::printf("  GPU processes  none now\n");
  else if (unresolved == 0)
    std::printf("  GPU processes  %zu, every PID resolves here\n", listed);
  else
    std::printf("  GPU processes  %zu, %zu of them with PIDs that do not resolve here (another PID namespace's): "
                "`run`, `attach` and notebooks match a job by its open device files\n",
                listed, unresolved);
}

/// Whole days from a YYYY-MM-DD date to today (UTC); nullopt when the text is not such a date.
std::optional<long> days_since(const std::string& date) {
  int y = 0;
  unsigned m = 0, d = 0;
  if (std::sscanf(date.c_str(), "%d-%u-%u", &y, &m, &d) != 3) return std::nullopt;
  std::chrono::year_month_day ymd{std::chrono::year{y}, std::chrono::month{m}, std::chrono::day{d}};
  if (!ymd.ok()) return std::nullopt;
  auto today = std::chrono::floor<std::chrono::days>(std::chrono::system_clock::now());
  return static_cast<long>((today - std::chrono::sys_days{ymd}).count());
}

void print_catalog() {
  auto catalog = load_catalog(std::nullopt);
  if (!catalog) {
    std::printf("\ncatalog          NOT AVAILABLE: %s\n", catalog.error().message.c_str());
    return;
  }
  std::string newest = catalog->newest_price_date();
  auto age = days_since(newest);
  std::printf("\ncatalog          %zu GPUs, %zu offers; newest price %s%s\n", catalog->gpus().size(),
              catalog->offers().size(), newest.empty() ? "unknown" : newest.c_str(),
              age ? fmt::format(" ({} days old)", *age).c_str() : "");
  const auto fetched = existing_user_catalog_path();
  std::printf("  fetched prices %s\n",
              fetched
                  ? fetched->c_str()
                  : fmt::format("none yet ({} after 'gpumeter prices update')", user_catalog_path()).c_str());
  std::set<std::string> providers;
  for (const auto& o : catalog->offers()) providers.insert(o.provider);
  bool stale = false;
  for (const auto& p : providers) {
    const std::string date = catalog->newest_price_date(p);
    const auto days = days_since(date);
    std::size_t n = 0, from_fetch = 0;
    for (const auto& o : catalog->offers())
      if (o.provider == p) {
        ++n;
        if (!o.fetched_at.empty()) ++from_fetch;
      }
    const bool old = days && *days > 30;
    stale = stale || old;
    std::printf("  %-14s %zu offers (%zu fetched), newest %s%s%s\n", p.c_str(), n, from_fetch,
                date.empty() ? "undated" : date.c_str(),
                days ? fmt::format(", {} days old", *days).c_str() : "",
                old ? "  WARNING: older than 30 days" : "");
  }
  if (stale)
    std::printf(
        "  prices older than 30 days may no longer match your bill: run 'gpumeter prices update' "
        "(or enable gpumeter-prices-update.timer)\n");
}

/// Whether the kubelet pod-resources socket answers (pod names and GPUs held by pods for agent and top).
void print_pod_resources(const std::string& socket_path) {
  if (socket_path.empty()) return;
  KubeletPodResources source(socket_path);
  auto r = source.list();
  if (r) {
    std::printf("kubelet pod-resources  %s: reachable, %zu device assignment(s)\n", socket_path.c_str(), r->size());
  } else if (r.error().kind == ErrorKind::not_found) {
    std::printf("kubelet pod-resources  %s: absent (not a Kubernetes node, or not mounted)\n", socket_path.c_str());
  } else {
    std::printf("kubelet pod-resources  NOT REACHABLE: %s\n", r.error().message.c_str());
  }
}

/// Which method attributes GPU processes to Slurm jobs on this node.
void print_slurm(const std::string& conf_path) {
  const SlurmAttribution a = slurm_attribution(conf_path, ::geteuid() == 0);
  std::printf("Slurm jobs       %s: %s\n", to_string(a.method), a.detail.c_str());
}

/// Whether each serving engine's metrics endpoint answers with counters gpumeter can read (one bounded
/// scrape).
void print_inference_endpoints(const std::vector<serving::InferenceEndpointSpec>& specs) {
  for (const auto& spec : specs) {
    const serving::ScrapeOutcome out = serving::scrape_endpoint(spec, 2000);
    if (!out.reading) {
      std::printf("inference endpoint  %s: NOT USABLE: %s: %s\n", spec.display.c_str(), out.error.c_str(),
                  out.detail.c_str());
      if (out.error == "http")
        if (auto why = serving::metrics_disabled_reason(spec, 2000))
          std::printf("inference endpoint  %s: %s\n", spec.display.c_str(), why->c_str());
      continue;
    }
    std::string models;
    for (const auto& [name, m] : out.reading->models) models += (models.empty() ? "" : ", ") + name;
    std::printf("inference endpoint  %s: %s, %zu model(s): %s\n", spec.display.c_str(),
                serving::to_string(out.reading->engine), out.reading->models.size(), models.c_str());
  }
}

/// What the agent's --inference-discover would find now: the TCP ports this node's GPU processes listen on
/// (from `proc_root`), each probed once for a known engine's /metrics.
void print_inference_discovery(GpuBackend* backend, const std::string& proc_root) {
  if (backend == nullptr) {
    std::printf("inference discovery  not possible: no GPU library, so no GPU process list\n");
    return;
  }
  std::set<std::uint32_t> pids;
  for (const auto& info : backend->devices())
    for (const auto& p : backend->sample(info.index).processes) pids.insert(p.pid);
  if (pids.empty()) {
    std::printf("inference discovery  no GPU process on this node now: nothing to probe\n");
    return;
  }
  const auto ports = serving::listening_ports(proc_root, pids);
  if (ports.empty()) {
    std::printf(
        "inference discovery  %zu GPU process(es); none listens on a TCP port visible here (another network "
        "namespace, or no permission to read their fds): give the endpoint with --inference-endpoint\n",
        pids.size());
    return;
  }
  std::string list;
  for (auto port : ports) list += (list.empty() ? "" : ",") + std::to_string(port);
  const serving::ProbeResult probe = serving::probe_engine_ports("127.0.0.1", ports, 2000);
  for (const auto& note : probe.notes) std::printf("inference discovery  %s\n", note.c_str());
  const auto& found = probe.found;
  if (!found) {
    std::printf(
        "inference discovery  %zu GPU process(es) listen on port(s) %s; none answers /metrics as vLLM, "
        "SGLang, "
        "TGI or Triton\n",
        pids.size(), list.c_str());
    return;
  }
  const serving::ScrapeOutcome out = serving::scrape_endpoint(*found, 2000);
  std::string models;
  if (out.reading)
    for (const auto& [name, m] : out.reading->models) models += (models.empty() ? "" : ", ") + name;
  std::printf("inference discovery  found %s at %s (GPU processes' ports: %s); model(s): %s\n",
              out.reading ? serving::to_string(out.reading->engine) : "an engine", found->display.c_str(),
              list.c_str(), models.empty() ? "none yet" : models.c_str());
}

/// Whether preemption notices can be read here: the cloud the instance detector finds (or the one named), and
/// one bounded poll of its metadata service.
void print_preemption(const std::string& mode_text, const std::optional<std::string>& url_flag) {
  auto mode = parse_preemption_mode(mode_text);
  const char* env = std::getenv("GPUMETER_METADATA_URL");
  auto base = metadata_base_url(url_flag, env ? std::optional<std::string>(env) : std::nullopt);
  if (!mode || !base) {
    std::printf("preemption notices  NOT USABLE: %s\n",
                (!mode ? mode.error() : base.error()).message.c_str());
    return;
  }
  if (mode->off) {
    std::printf("preemption notices  off (--preemption off)\n");
    return;
  }
  std::optional<CloudProvider> provider = mode->provider ? mode->provider : detect_cloud_provider();
  if (!provider) {
    std::printf(
        "preemption notices  this machine is not an AWS, GCP or Azure VM (DMI): `run --preemption auto` "
        "stays "
        "off; name the provider with --preemption to watch anyway\n");
    return;
  }
  auto client = make_http_metadata_client(*base, kMetadataTimeoutMs);
  NoticePoller poller(*provider, *client);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = poller.poll(system_clock().unix_ms());
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
  const std::string name(provider_name(*provider));
  if (!r) {
    std::printf(
        "preemption notices  %s metadata service at %s: NOT USABLE (%s, after %lld ms): `run` goes on "
        "without notices, polling in the background (the job is never delayed)\n",
        name.c_str(), base->c_str(), r.error().message.c_str(), static_cast<long long>(ms));
    return;
  }
  std::string notices;
  for (const auto& n : *r) notices += (notices.empty() ? "" : "; ") + n.detail;
  std::printf("preemption notices  %s metadata service at %s answers in %lld ms: %s\n", name.c_str(),
              base->c_str(), static_cast<long long>(ms), notices.empty() ? "no notice now" : notices.c_str());
}

}  // namespace

int cmd_doctor(int argc, char** argv) {
  CLI::App app{"What works here: NVML, driver, energy counter, MIG, permissions, catalog age", "doctor"};
  std::string pod_resources_socket = kDefaultPodResourcesSocket;
  app.add_option("--pod-resources-socket", pod_resources_socket, "kubelet pod-resources socket to check (\"\" skips)");
  const char* env_conf = std::getenv("SLURM_CONF");
  std::string slurm_conf = env_conf && *env_conf ? env_conf : "/etc/slurm/slurm.conf";
  app.add_option("--slurm-conf", slurm_conf, "slurm.conf to read (default $SLURM_CONF, else /etc/slurm/slurm.conf)");
  std::vector<std::string> inference_endpoints;
  app.add_option("--inference-endpoint", inference_endpoints,
                 "a serving engine's metrics endpoint to check, URL[,owner=NAME][,model=NAME] (repeatable)");
  bool inference_discover = false;
  std::string proc_root = "/proc";
  app.add_flag(
      "--inference-discover", inference_discover,
      "also list what the agent's --inference-discover would find: the ports GPU processes listen on, "
      "probed once for a serving engine's /metrics");
  app.add_option("--proc-root", proc_root,
                 "the /proc tree to read listening sockets from (with --inference-discover)");
  std::string preemption = "auto";
  std::optional<std::string> metadata_url;
  app.add_option(
      "--preemption", preemption,
      "which cloud's preemption notices to check: auto (the detected cloud), aws, gcp, azure, off");
  std::string agent_listen = "127.0.0.1:9835";
  app.add_option("--agent", agent_listen,
                 "the local agent to ask about its autostop (HOST:PORT, default 127.0.0.1:9835)");
  app.add_option(
      "--metadata-url", metadata_url,
      "base URL of the metadata service (default $GPUMETER_METADATA_URL, else http://169.254.169.254)");
  if (auto rc = parse_args(app, argc, argv)) return *rc;
  std::vector<serving::InferenceEndpointSpec> specs;
  for (const auto& text : inference_endpoints) {
    auto spec = serving::parse_inference_endpoint(text);
    if (!spec) return fail("doctor", spec.error());
    specs.push_back(*spec);
  }

  int exit_code = kExitOk;
  std::printf("gpumeter %s doctor\n", GPUMETER_VERSION);
  std::printf("NVML call bound  %lld ms per call (a device whose call overruns is reported unresponsive)\n",
              static_cast<long long>(kGpuCallTimeoutMs));
  const char* dev_env = std::getenv("GPUMETER_DEV_ROOT");
  const std::string dev_root = gpu_device_root(dev_env ? std::optional<std::string>(dev_env) : std::nullopt);
  auto backend = open_gpu_backend();
  if (!backend) {
    std::printf("NVML             NOT AVAILABLE: %s\n", backend.error().message.c_str());
    exit_code = exit_code_for(backend.error().kind);
  } else {
    auto& b = **backend;
    std::printf("NVML             %s\n", b.origin().c_str());
    std::printf("NVML version     %s\n", b.library_version().value_or("unknown").c_str());
    std::printf("driver version   %s\n", b.driver_version().value_or("unknown").c_str());
    std::printf("devices          %zu\n", b.devices().size());
    for (const auto& info : b.devices()) print_device(b, info, dev_root);
  }
  print_pid_namespace(backend ? backend->get() : nullptr, proc_root);
  print_catalog();
  print_pod_resources(pod_resources_socket);
  print_slurm(slurm_conf);
  print_inference_endpoints(specs);
  if (inference_discover) print_inference_discovery(backend ? backend->get() : nullptr, proc_root);
  print_preemption(preemption, metadata_url);
  if (auto autostop = agent::autostop_text(agent_listen, 500))
    std::printf("agent autostop   %s (agent at %s)\n", autostop->c_str(), agent_listen.c_str());
  else
    std::printf("agent autostop   no agent with --autostop-idle answers at %s\n", agent_listen.c_str());
  if (exit_code != kExitOk) {
    std::fprintf(stderr, "gpumeter doctor: error: %s\n", backend.error().message.c_str());
  }
  return exit_code;
}

}  // namespace gm::cli
