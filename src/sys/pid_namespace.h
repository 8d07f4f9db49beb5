#pragma once
// Whose PIDs NVML reports, and the other way to tell which GPUs a process uses. The driver knows no PID
// namespaces: it reports PIDs of the initial (host) namespace, which do not resolve inside a container or a
// pod. A process that uses a GPU holds its device file open (/dev/nvidia<minor>), which is visible from
// inside through /proc/PID/fd.
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "sys/proc.h"

namespace gm::sys {

/// The inode number the kernel gives the initial PID namespace (PROC_PID_INIT_INO, `pid:[4026531836]`).
inline constexpr std::uint64_t kInitialPidNamespaceInode = 0xEFFFFFFCULL;

/// What gpumeter can tell about the PID namespace it runs in.
struct PidNamespaceFacts {
  std::optional<std::uint64_t> pid_ns_inode;   ///< of <proc>/self/ns/pid; nullopt when unreadable
  std::size_t nspid_levels = 0;                ///< entries of NSpid in <proc>/self/status (0: unreadable)
  std::vector<std::string> container_markers;  ///< "/.dockerenv", "KUBERNETES_SERVICE_HOST", "cgroup: ..."
  /// true: gpumeter's PIDs are not the driver's (a PID namespace other than the initial one); false: they
  /// are; nullopt: it cannot tell (then PIDs NVML reports that do not resolve here are taken as foreign).
  std::optional<bool> foreign_pids() const;
  /// One sentence for `doctor` and the report's notes.
  std::string describe() const;
  /// The facts of the host's (initial) PID namespace.
  static PidNamespaceFacts host() {
    PidNamespaceFacts f;
    f.pid_ns_inode = kInitialPidNamespaceInode;
    return f;
  }
};

/// Where the namespace probe reads: this machine by default; tests give a /proc-like tree, a root folder
/// and an environment.
struct PidNamespaceProbe {
  std::string proc_root = "/proc";
  std::string fs_root;  ///< prefix of /.dockerenv and /run/.containerenv ("" = /)
  /// The environment (KUBERNETES_SERVICE_HOST); null = getenv.
  std::function<std::optional<std::string>(const std::string&)> env;
};

/// Reads the PID namespace of this process and the container markers.
PidNamespaceFacts detect_pid_namespace(const PidNamespaceProbe& probe = {});

/// The inode of a namespace link text ("pid:[4026531836]" → 4026531836); nullopt when malformed.
std::optional<std::uint64_t> namespace_inode(const std::string& link_text);

/// The folder of the GPU device files: `dev_root_env` ($GPUMETER_DEV_ROOT) when set and not empty, else
/// "/dev"; made absolute, symbolic links resolved, so it compares with what /proc/PID/fd links point to.
std::string gpu_device_root(const std::optional<std::string>& dev_root_env);

/// "<root>/nvidia<minor>".
std::string gpu_device_path(const std::string& dev_root, unsigned minor);

/// Whether <root>/nvidia<minor> exists (the container was given this GPU's device file).
bool gpu_device_file_present(const std::string& dev_root, unsigned minor);

/// The minor number of a GPU device file path under `dev_root` ("/dev/nvidia3" → 3); nullopt for any other
/// path (nvidiactl, nvidia-uvm, nvidia-caps/..., files elsewhere).
std::optional<unsigned> gpu_minor_of_path(const std::string& dev_root, const std::string& path);

/// The GPU device files processes hold open.
struct HeldDeviceFiles {
  std::set<unsigned> minors;           ///< GPUs whose device file one of the processes holds open
  std::set<std::uint32_t> unreadable;  ///< processes whose open files could not be read
};
/// The GPU device files (under `dev_root`) that `pids` hold open.
HeldDeviceFiles held_gpu_device_files(const ProcReader& proc, const std::set<std::uint32_t>& pids,
                                      const std::string& dev_root);

/// Every process visible in `proc` that holds <dev_root>/nvidia<minor> open (processes whose files cannot
/// be read are left out).
std::set<std::uint32_t> gpu_device_holders(const ProcReader& proc, const std::string& dev_root,
                                           unsigned minor);

}  // namespace gm::sys
