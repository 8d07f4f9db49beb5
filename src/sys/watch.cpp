// The ProcessRunner of `gpumeter attach`: a process gpumeter did not start, watched through a pidfd.
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "sys/proc.h"
#include "sys/spawn.h"
#include "util/file.h"

namespace gm::sys {

Result<std::unique_ptr<WatchedProcessRunner>> WatchedProcessRunner::watch(pid_t pid) {
  if (pid <= 0) return make_error(ErrorKind::usage, "PID " + std::to_string(pid) + ": expected a process id");
  ProcReader proc;
  auto ticks = proc.start_ticks(static_cast<std::uint32_t>(pid));
  if (!ticks || kill(pid, 0) != 0) {
    if (errno == EPERM && ticks)
      return make_error("process " + std::to_string(pid) +
                        " belongs to another user: gpumeter could not stop it (run attach as that user)");
    return make_error(ErrorKind::not_found, "no process " + std::to_string(pid));
  }
  int fd = -1;
#ifdef SYS_pidfd_open
  fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) fd = -1;  // an old kernel: /proc polling
#endif
  return std::unique_ptr<WatchedProcessRunner>(new WatchedProcessRunner(pid, fd, *ticks));
}

WatchedProcessRunner::WatchedProcessRunner(pid_t pid, int pidfd, std::string start_ticks)
    : pid_(pid), pidfd_(pidfd), start_ticks_(std::move(start_ticks)) {}

WatchedProcessRunner::~WatchedProcessRunner() {
  if (pidfd_ >= 0) close(pidfd_);
}

Result<SpawnedChild> WatchedProcessRunner::spawn(const SpawnOptions&) {
  return make_error("an attached session starts no process");
}

bool WatchedProcessRunner::alive() const {
  // A zombie has ended (its parent has not reaped it yet); a new process under the same PID is not ours.
  ProcReader proc;
  auto info = util::read_small_file(proc.root() + "/" + std::to_string(pid_) + "/stat");
  if (!info) return false;
  const auto close = info->rfind(')');
  if (close == std::string::npos || close + 2 >= info->size()) return false;
  const char state = (*info)[close + 2];
  if (state == 'Z' || state == 'X') return false;
  return proc.start_ticks(static_cast<std::uint32_t>(pid_)) == start_ticks_;
}

bool WatchedProcessRunner::send_signal(pid_t pid, int sig, bool group) {
  if (pid != pid_ || !alive()) return false;
  bool any = false;
  if (pidfd_ >= 0) {
#ifdef SYS_pidfd_send_signal
    any = syscall(SYS_pidfd_send_signal, pidfd_, sig, nullptr, 0) == 0;
#else
    any = kill(pid_, sig) == 0;
#endif
  } else {
    any = kill(pid_, sig) == 0;
  }
  if (group)
    for (auto p : ProcReader().descendants(static_cast<std::uint32_t>(pid_)))
      any = kill(static_cast<pid_t>(p), sig) == 0 || any;
  return any;
}

std::optional<int> WatchedProcessRunner::try_wait(pid_t pid) {
  if (pid != pid_) return std::nullopt;
  return alive() ? std::nullopt : std::optional<int>(0);
}

std::set<std::uint32_t> WatchedProcessRunner::job_pids(pid_t pid) {
  std::set<std::uint32_t> pids{static_cast<std::uint32_t>(pid)};
  for (auto p : ProcReader().descendants(static_cast<std::uint32_t>(pid))) pids.insert(p);
  return pids;
}

}  // namespace gm::sys
