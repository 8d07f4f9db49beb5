#include "sys/pid_namespace.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "sys/owner.h"
#include "util/file.h"

namespace gm::sys {

std::optional<std::uint64_t> namespace_inode(const std::string& link_text) {
  const auto open = link_text.find('[');
  const auto close = link_text.rfind(']');
  if (open == std::string::npos || close == std::string::npos || close <= open + 1) return std::nullopt;
  const std::string digits = link_text.substr(open + 1, close - open - 1);
  if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 19) return std::nullopt;
  return static_cast<std::uint64_t>(std::stoull(digits));
}

std::optional<bool> PidNamespaceFacts::foreign_pids() const {
  if (pid_ns_inode) return *pid_ns_inode != kInitialPidNamespaceInode;
  if (nspid_levels > 1) return true;
  return std::nullopt;
}

std::string PidNamespaceFacts::describe() const {
  std::string markers;
  for (const auto& m : container_markers) markers += (markers.empty() ? "" : ", ") + m;
  const std::string container = markers.empty() ? "" : "container markers: " + markers;
  const auto foreign = foreign_pids();
  if (foreign && *foreign) {
    std::string detail = "pid:[" + (pid_ns_inode ? std::to_string(*pid_ns_inode) : std::string("?")) + "]";
    if (nspid_levels > 1) detail += ", " + std::to_string(nspid_levels) + " NSpid levels";
    if (!container.empty()) detail += "; " + container;
    return "gpumeter runs in a PID namespace other than the host's (" + detail +
           "): NVML reports the driver's (host) PIDs, which do not resolve here, so a job is matched to its "
           "GPUs by the device files its processes hold open";
  }
  const std::string in_container = container.empty() ? "" : " (" + container + ")";
  if (foreign)
    return "gpumeter runs in the host's PID namespace" + in_container +
           ": the PIDs NVML reports are this machine's, a job is matched to its GPUs by its processes' PIDs";
  return "the PID namespace cannot be read (/proc/self/ns/pid)" + in_container +
         ": PIDs NVML reports that do not resolve here are taken as another namespace's";
}

PidNamespaceFacts detect_pid_namespace(const PidNamespaceProbe& probe) {
  PidNamespaceFacts f;
  char buf[256];
  const std::string link = probe.proc_root + "/self/ns/pid";
  const ssize_t n = ::readlink(link.c_str(), buf, sizeof buf);
  if (n > 0) f.pid_ns_inode = namespace_inode(std::string(buf, static_cast<std::size_t>(n)));
  if (auto status = util::read_small_file(probe.proc_root + "/self/status")) {
    std::istringstream ss(*status);
    std::string line;
    while (std::getline(ss, line))
      if (line.rfind("NSpid:", 0) == 0) {
        std::istringstream v(line.substr(6));
        std::string pid;
        while (v >> pid) ++f.nspid_levels;
      }
  }
  for (const char* marker : {"/.dockerenv", "/run/.containerenv"}) {
    std::error_code ec;
    if (std::filesystem::exists(probe.fs_root + marker, ec)) f.container_markers.emplace_back(marker);
  }
  auto env = probe.env ? probe.env : [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    return v ? std::optional<std::string>(v) : std::nullopt;
  };
  if (auto k8s = env("KUBERNETES_SERVICE_HOST"); k8s && !k8s->empty())
    f.container_markers.emplace_back("KUBERNETES_SERVICE_HOST");
  if (auto cgroup = util::read_small_file(probe.proc_root + "/self/cgroup")) {
    const CgroupFacts c = parse_cgroup(*cgroup);
    if (c.pod_uid)
      f.container_markers.push_back("cgroup: pod " + *c.pod_uid);
    else if (c.container_id)
      f.container_markers.push_back("cgroup: container " + c.container_id->substr(0, 12));
  }
  return f;
}

std::string gpu_device_root(const std::optional<std::string>& dev_root_env) {
  std::string root = dev_root_env && !dev_root_env->empty() ? *dev_root_env : std::string("/dev");
  std::error_code ec;
  auto canonical = std::filesystem::weakly_canonical(std::filesystem::absolute(root, ec), ec);
  if (!ec && !canonical.empty()) root = canonical.lexically_normal().string();
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  return root;
}

std::string gpu_device_path(const std::string& dev_root, unsigned minor) {
  return (dev_root == "/" ? std::string() : dev_root) + "/nvidia" + std::to_string(minor);
}

bool gpu_device_file_present(const std::string& dev_root, unsigned minor) {
  std::error_code ec;
  return std::filesystem::exists(gpu_device_path(dev_root, minor), ec);
}

std::optional<unsigned> gpu_minor_of_path(const std::string& dev_root, const std::string& path) {
  const std::string prefix = (dev_root == "/" ? std::string() : dev_root) + "/nvidia";
  if (path.size() <= prefix.size() || path.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  const std::string digits = path.substr(prefix.size());
  if (digits.size() > 6 || digits.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return static_cast<unsigned>(std::stoul(digits));
}

HeldDeviceFiles held_gpu_device_files(const ProcReader& proc, const std::set<std::uint32_t>& pids,
                                      const std::string& dev_root) {
  HeldDeviceFiles out;
  for (auto pid : pids) {
    auto targets = proc.fd_targets(pid);
    if (!targets) {
      if (proc.exists(pid)) out.unreadable.insert(pid);
      continue;
    }
    for (const auto& t : *targets)
      if (auto minor = gpu_minor_of_path(dev_root, t)) out.minors.insert(*minor);
  }
  return out;
}

std::set<std::uint32_t> gpu_device_holders(const ProcReader& proc, const std::string& dev_root,
                                           unsigned minor) {
  std::set<std::uint32_t> out;
  for (auto pid : proc.pids()) {
    auto targets = proc.fd_targets(pid);
    if (!targets) continue;
    for (const auto& t : *targets)
      if (gpu_minor_of_path(dev_root, t) == minor) {
        out.insert(pid);
        break;
      }
  }
  return out;
}

}  // namespace gm::sys
