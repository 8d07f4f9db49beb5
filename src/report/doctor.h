#pragma once
// `gpumeter doctor`'s sections: what works on this machine, each check run once and said in words (the GPU
// library and each device, the PID namespace, the catalog's age, the kubelet, Slurm, serving engines, cloud
// preemption notices). Every function returns the text of its section.
#include <optional>
#include <string>
#include <vector>

#include "gpu/gpu.h"
#include "serving/serving.h"

namespace gm::report {

/// One device: identity, device file, state, each capability, the energy method, MIG, permissions, notes.
std::string doctor_device(gpu::GpuBackend& backend, const gpu::DeviceInfo& info, const std::string& dev_root);
/// Whose PIDs the GPU library reports, and whether the GPU processes' PIDs resolve under `proc_root`.
std::string doctor_pid_namespace(gpu::GpuBackend* backend, const std::string& proc_root);
/// The catalog: GPUs, offers, the newest price per provider and its age (a warning past 30 days).
std::string doctor_catalog();
/// Whether the kubelet pod-resources socket answers ("" when `socket_path` is empty).
std::string doctor_pod_resources(const std::string& socket_path);
/// Which method attributes GPU processes to Slurm jobs on this node.
std::string doctor_slurm(const std::string& conf_path);
/// Whether each serving engine's metrics endpoint answers with counters gpumeter reads (one bounded scrape).
std::string doctor_inference_endpoints(const std::vector<serving::InferenceEndpointSpec>& specs);
/// What the agent's --inference-discover would find now (the ports GPU processes listen on, probed once).
std::string doctor_inference_discovery(gpu::GpuBackend* backend, const std::string& proc_root);
/// Whether preemption notices can be read: the detected (or named) cloud and one bounded metadata poll.
std::string doctor_preemption(const std::string& mode_text, const std::optional<std::string>& url_flag);

}  // namespace gm::report
