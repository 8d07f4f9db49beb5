// gpumeter doctor: what works here (NVML, driver, per-device capabilities, energy method, MIG,
// permissions, catalog age).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "cli/agent_node.h"
#include "cli/cli.h"
#include "cli/common.h"
#include "gpu/gpu.h"
#include "kubelet/pod_resources.h"
#include "report/doctor.h"
#include "serving/serving.h"
#include "sys/pid_namespace.h"

namespace gm::cli {

int cmd_doctor(int argc, char** argv) {
  CLI::App app{"What works here: NVML, driver, energy counter, MIG, permissions, catalog age", "doctor"};
  std::string pod_resources_socket = kubelet::kDefaultPodResourcesSocket;
  app.add_option("--pod-resources-socket", pod_resources_socket,
                 "kubelet pod-resources socket to check (\"\" skips)");
  const char* env_conf = std::getenv("SLURM_CONF");
  std::string slurm_conf = env_conf && *env_conf ? env_conf : "/etc/slurm/slurm.conf";
  app.add_option("--slurm-conf", slurm_conf,
                 "slurm.conf to read (default $SLURM_CONF, else /etc/slurm/slurm.conf)");
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

  int exit_code = util::kExitOk;
  std::printf("gpumeter %s doctor\n", GPUMETER_VERSION);
  std::printf("NVML call bound  %lld ms per call (a device whose call overruns is reported unresponsive)\n",
              static_cast<long long>(gpu::kGpuCallTimeoutMs));
  const char* dev_env = std::getenv("GPUMETER_DEV_ROOT");
  const std::string dev_root =
      sys::gpu_device_root(dev_env ? std::optional<std::string>(dev_env) : std::nullopt);
  auto backend = gpu::open_gpu_backend();
  if (!backend) {
    std::printf("NVML             NOT AVAILABLE: %s\n", backend.error().message.c_str());
    exit_code = util::exit_code_for(backend.error().kind);
  } else {
    auto& b = **backend;
    std::printf("NVML             %s\n", b.origin().c_str());
    std::printf("NVML version     %s\n", b.library_version().value_or("unknown").c_str());
    std::printf("driver version   %s\n", b.driver_version().value_or("unknown").c_str());
    std::printf("devices          %zu\n", b.devices().size());
    for (const auto& info : b.devices()) std::fputs(report::doctor_device(b, info, dev_root).c_str(), stdout);
  }
  std::fputs(report::doctor_pid_namespace(backend ? backend->get() : nullptr, proc_root).c_str(), stdout);
  std::fputs(report::doctor_catalog().c_str(), stdout);
  std::fputs(report::doctor_pod_resources(pod_resources_socket).c_str(), stdout);
  std::fputs(report::doctor_slurm(slurm_conf).c_str(), stdout);
  std::fputs(report::doctor_inference_endpoints(specs).c_str(), stdout);
  if (inference_discover)
    std::fputs(report::doctor_inference_discovery(backend ? backend->get() : nullptr, proc_root).c_str(),
               stdout);
  std::fputs(report::doctor_preemption(preemption, metadata_url).c_str(), stdout);
  if (auto autostop = agent::autostop_text(agent_listen, 500))
    std::printf("agent autostop   %s (agent at %s)\n", autostop->c_str(), agent_listen.c_str());
  else
    std::printf("agent autostop   no agent with --autostop-idle answers at %s\n", agent_listen.c_str());
  if (exit_code != util::kExitOk) {
    std::fprintf(stderr, "gpumeter doctor: error: %s\n", backend.error().message.c_str());
  }
  return exit_code;
}

}  // namespace gm::cli
