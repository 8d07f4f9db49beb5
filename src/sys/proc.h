#pragma once
// ProcReader: reads a directory laid out like /proc (the real one, or a test tree).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gm::sys {

/// Facts about one process read from <root>/<pid>/.
struct ProcInfo {
  std::uint32_t pid = 0;
  std::uint32_t ppid = 0;
  std::uint32_t pgid = 0;
  std::string comm;                              ///< /proc/PID/comm (executable name, never argv)
  std::optional<std::uint32_t> uid;              ///< real uid from /proc/PID/status
  std::string cgroup;                            ///< raw /proc/PID/cgroup contents
};

/// Reads processes from a /proc-like tree.
class ProcReader {
 public:
  explicit ProcReader(std::string root = "/proc") : root_(std::move(root)) {}
  /// PIDs present now.
  std::vector<std::uint32_t> pids() const;
  /// One process, or nullopt if it vanished or cannot be read.
  std::optional<ProcInfo> read(std::uint32_t pid) const;
  /// The arguments of a process (/proc/PID/cmdline, NUL-separated), at most `max_args`; nullopt when it
  /// cannot be read or is empty (a kernel thread, a zombie).
  std::optional<std::vector<std::string>> cmdline(std::uint32_t pid, std::size_t max_args) const;
  /// One environment variable of a process (needs permission; nullopt otherwise).
  std::optional<std::string> environ_var(std::uint32_t pid, const std::string& name) const;
  /// All descendants of `root_pid` (not including it), from the ppid links of the current snapshot.
  std::vector<std::uint32_t> descendants(std::uint32_t root_pid) const;
  /// How long ago process `pid` started (ms), from <root>/PID/stat's start time and <root>/uptime; nullopt
  /// when either cannot be read.
  std::optional<std::int64_t> age_ms(std::uint32_t pid) const;
  /// The start time field of <root>/PID/stat (clock ticks after boot, as text); nullopt when unreadable.
  std::optional<std::string> start_ticks(std::uint32_t pid) const;
  /// Whether <root>/PID exists (a PID of another PID namespace does not).
  bool exists(std::uint32_t pid) const;
  /// What each open file descriptor of `pid` points to (readlink of <root>/PID/fd/*); nullopt when the fd
  /// folder cannot be read (the process is gone, or another user's without permission).
  std::optional<std::vector<std::string>> fd_targets(std::uint32_t pid) const;
  /// The root directory ("/proc").
  const std::string& root() const { return root_; }

 private:
  std::string root_;
};

/// User name for a uid (getpwuid_r), or the number as text.
std::string user_name(std::uint32_t uid);

}  // namespace gm::sys
