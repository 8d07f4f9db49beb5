#pragma once
// Child spawning for `gpumeter run`: the job gets its own process group (its own session on a pty), and
// either a pseudo-terminal (when gpumeter has one) or pipes for stdout/stderr so its output can be copied
// through byte for byte and scanned for progress.
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "util/result.h"

namespace gm::sys {

/// How to start the job.
struct SpawnOptions {
  std::vector<std::string> argv;           ///< argv[0] is looked up in PATH
  std::map<std::string, std::string> env;  ///< added to (overriding) gpumeter's environment
  bool use_pty = false;                    ///< stdin/stdout/stderr on a new pty (controlling terminal)
  std::optional<std::pair<unsigned short, unsigned short>> window;  ///< pty rows, cols
};

/// A started job. Descriptors are owned by the caller (close them).
struct SpawnedChild {
  pid_t pid = -1;              ///< also the process group id
  int stdout_fd = -1;          ///< read end (pipes mode)
  int stderr_fd = -1;          ///< read end (pipes mode)
  int pty_fd = -1;             ///< master (pty mode): read output, write input
  bool owns_terminal = false;  ///< pipes mode: the job's group was made the terminal's foreground
};

/// Starts processes; a seam so the supervisor can be driven by a fake in tests.
class ProcessRunner {
 public:
  virtual ~ProcessRunner() = default;
  /// Starts the job; error with the errno text when the program cannot be executed: kind not_found when
  /// it does not exist (exit 127 by convention), failure when it exists but cannot run (126).
  virtual Result<SpawnedChild> spawn(const SpawnOptions& options) = 0;
  /// Sends `sig` to process `pid`, or with `group` to its process group; false when none received it.
  virtual bool send_signal(pid_t pid, int sig, bool group) = 0;
  /// The wait status of `pid` once it has exited (reaping it); nullopt while it runs. Never blocks.
  virtual std::optional<int> try_wait(pid_t pid) = 0;
  /// `pid` and its live descendants (the job's processes, for attribution).
  virtual std::set<std::uint32_t> job_pids(pid_t pid) = 0;
};

/// fork + exec with a process group, pty or pipes; kill(2), waitpid(2) and /proc.
class PosixProcessRunner final : public ProcessRunner {
 public:
  Result<SpawnedChild> spawn(const SpawnOptions& options) override;
  bool send_signal(pid_t pid, int sig, bool group) override;
  std::optional<int> try_wait(pid_t pid) override;
  std::set<std::uint32_t> job_pids(pid_t pid) override;
};

/// Writes all of `bytes` to `fd`, retrying on EINTR and waiting out EAGAIN; drops the rest once `fd` is
/// closed (a reader gone must not stop the copying of a job's output).
void write_all(int fd, std::string_view bytes);

/// Makes gpumeter's process group the foreground of its terminal again (after a job that owned it).
void restore_terminal_foreground();
/// Sets the window size of a pty master.
void set_pty_window(int pty_fd, unsigned short rows, unsigned short cols);
/// The window size of a terminal fd, if it is one.
std::optional<std::pair<unsigned short, unsigned short>> terminal_window(int fd);
/// Exit code of a wait status: the exit status, or 128+N for a signal.
int exit_code_of_wait_status(int status);
/// Signal number for "TERM", "SIGTERM", "term" or "15"; usage error otherwise.
Result<int> parse_signal(const std::string& text);
/// "SIGTERM" for 15.
std::string signal_name(int sig);

}  // namespace gm::sys

namespace gm::sys {

/// The ProcessRunner of `gpumeter attach`: the job is a process gpumeter did not start (not its child).
/// Its end is seen through a pidfd (pidfd_open, Linux 5.3+; immune to PID reuse) or, without one, by
/// polling /proc. It has no wait status for gpumeter: try_wait returns 0 once it is gone. `group` signals
/// go to the process and its live descendants, never to its process group (that may be a shell's).
class WatchedProcessRunner final : public ProcessRunner {
 public:
  /// Watches `pid`; not_found when no such process exists, failure when it cannot be signalled (another
  /// user's process without permission).
  static Result<std::unique_ptr<WatchedProcessRunner>> watch(pid_t pid);
  ~WatchedProcessRunner() override;
  WatchedProcessRunner(const WatchedProcessRunner&) = delete;
  WatchedProcessRunner& operator=(const WatchedProcessRunner&) = delete;
  /// Always an error: an attached session starts nothing.
  Result<SpawnedChild> spawn(const SpawnOptions& options) override;
  bool send_signal(pid_t pid, int sig, bool group) override;
  std::optional<int> try_wait(pid_t pid) override;
  std::set<std::uint32_t> job_pids(pid_t pid) override;
  /// A descriptor that becomes readable when the process ends (-1 without pidfd support: poll try_wait).
  int end_fd() const { return pidfd_; }

 private:
  WatchedProcessRunner(pid_t pid, int pidfd, std::string start_ticks);
  bool alive() const;
  pid_t pid_;
  int pidfd_;
  std::string start_ticks_;  ///< /proc/PID/stat field 22, to tell PID reuse apart without a pidfd
};

}  // namespace gm::sys
