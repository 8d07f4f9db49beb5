#include "sys/spawn.h"

#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "sys/proc.h"
#include "util/units.h"

namespace gm::sys {
namespace {

[[noreturn]] void exec_child(const SpawnOptions& o, int err_fd) {
  // Restore default dispositions and an empty mask: the job must see signals normally.
  for (int s :
       {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGCHLD, SIGWINCH, SIGTTOU, SIGTTIN, SIGTSTP, SIGXFSZ})
    signal(s, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  for (const auto& [k, v] : o.env) setenv(k.c_str(), v.c_str(), 1);
  std::vector<char*> args;
  for (const auto& a : o.argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  execvp(args[0], args.data());
  const int e = errno;
  ssize_t ignored = write(err_fd, &e, sizeof e);
  (void)ignored;
  _exit(127);
}

}  // namespace

Result<SpawnedChild> PosixProcessRunner::spawn(const SpawnOptions& o) {
  if (o.argv.empty()) return make_error(ErrorKind::usage, "no command to run");
  int err_pipe[2];
  if (pipe2(err_pipe, O_CLOEXEC) != 0) return make_error(std::string("pipe: ") + std::strerror(errno));
  SpawnedChild c;
  pid_t pid;
  int out_pipe[2] = {-1, -1}, errp[2] = {-1, -1};
  if (o.use_pty) {
    winsize ws{};
    if (o.window) {
      ws.ws_row = o.window->first;
      ws.ws_col = o.window->second;
    }
    termios tio{};
    const bool have_tio = tcgetattr(STDIN_FILENO, &tio) == 0;
    int master = -1;
    pid = forkpty(&master, nullptr, have_tio ? &tio : nullptr, o.window ? &ws : nullptr);
    if (pid < 0) {
      close(err_pipe[0]);
      close(err_pipe[1]);
      return make_error(std::string("forkpty: ") + std::strerror(errno));
    }
    if (pid == 0) {
      close(err_pipe[0]);
      exec_child(o, err_pipe[1]);  // forkpty made a new session: the job leads its own process group
    }
    fcntl(master, F_SETFD, FD_CLOEXEC);
    if (!have_tio) {
      // Input that is not a terminal (a pipe, a file) must not be echoed back into the job's output.
      termios t{};
      if (tcgetattr(master, &t) == 0) {
        t.c_lflag &= ~static_cast<tcflag_t>(ECHO | ECHONL);
        tcsetattr(master, TCSANOW, &t);
      }
    }
    c.pty_fd = master;
  } else {
    if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(errp, O_CLOEXEC) != 0) {
      close(err_pipe[0]);
      close(err_pipe[1]);
      return make_error(std::string("pipe: ") + std::strerror(errno));
    }
    // When gpumeter runs in the foreground of a terminal, the job's group takes the foreground so it can
    // read the terminal and gets ^C itself (a background group would be stopped by SIGTTIN).
    const bool take_terminal = isatty(STDIN_FILENO) && tcgetpgrp(STDIN_FILENO) == getpgrp();
    pid = fork();
    if (pid < 0) return make_error(std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
      close(err_pipe[0]);
      setpgid(0, 0);
      if (take_terminal) {
        signal(SIGTTOU, SIG_IGN);
        tcsetpgrp(STDIN_FILENO, getpid());
      }
      dup2(out_pipe[1], STDOUT_FILENO);
      dup2(errp[1], STDERR_FILENO);
      exec_child(o, err_pipe[1]);
    }
    setpgid(pid, pid);  // also in the parent, so the group exists before any kill(-pid)
    c.owns_terminal = take_terminal;
    close(out_pipe[1]);
    close(errp[1]);
    c.stdout_fd = out_pipe[0];
    c.stderr_fd = errp[0];
  }
  close(err_pipe[1]);
  int child_errno = 0;
  ssize_t n;
  do n = read(err_pipe[0], &child_errno, sizeof child_errno);
  while (n < 0 && errno == EINTR);
  close(err_pipe[0]);
  c.pid = pid;
  if (n == static_cast<ssize_t>(sizeof child_errno)) {
    int status = 0;
    waitpid(pid, &status, 0);
    for (int fd : {c.stdout_fd, c.stderr_fd, c.pty_fd})
      if (fd >= 0) close(fd);
    return make_error(child_errno == ENOENT ? ErrorKind::not_found : ErrorKind::failure,
                      "cannot run '" + o.argv[0] + "': " + std::strerror(child_errno));
  }
  return c;
}

bool PosixProcessRunner::send_signal(pid_t pid, int sig, bool group) {
  if (pid <= 0) return false;
  return kill(group ? -pid : pid, sig) == 0;
}

std::optional<int> PosixProcessRunner::try_wait(pid_t pid) {
  int status = 0;
  pid_t w;
  do w = waitpid(pid, &status, WNOHANG);
  while (w < 0 && errno == EINTR);
  if (w == pid) return status;
  return std::nullopt;
}

std::set<std::uint32_t> PosixProcessRunner::job_pids(pid_t pid) {
  std::set<std::uint32_t> pids{static_cast<std::uint32_t>(pid)};
  ProcReader proc;
  for (auto p : proc.descendants(static_cast<std::uint32_t>(pid))) pids.insert(p);
  return pids;
}

void write_all(int fd, std::string_view bytes) {
  const char* data = bytes.data();
  std::size_t n = bytes.size();
  while (n > 0) {
    const ssize_t w = write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        pollfd p{fd, POLLOUT, 0};
        poll(&p, 1, 100);
        continue;
      }
      return;
    }
    data += w;
    n -= static_cast<std::size_t>(w);
  }
}

void restore_terminal_foreground() {
  if (!isatty(STDIN_FILENO)) return;
  struct sigaction ign {
  }, old{};
  ign.sa_handler = SIG_IGN;
  sigaction(SIGTTOU, &ign, &old);
  tcsetpgrp(STDIN_FILENO, getpgrp());
  sigaction(SIGTTOU, &old, nullptr);
}

void set_pty_window(int pty_fd, unsigned short rows, unsigned short cols) {
  winsize ws{};
  ws.ws_row = rows;
  ws.ws_col = cols;
  ioctl(pty_fd, TIOCSWINSZ, &ws);
}

std::optional<std::pair<unsigned short, unsigned short>> terminal_window(int fd) {
  winsize ws{};
  if (ioctl(fd, TIOCGWINSZ, &ws) != 0 || ws.ws_row == 0 || ws.ws_col == 0) return std::nullopt;
  return std::make_pair(ws.ws_row, ws.ws_col);
}

int exit_code_of_wait_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

Result<int> parse_signal(const std::string& text) {
  static const std::pair<const char*, int> kNames[] = {
      {"TERM", SIGTERM}, {"INT", SIGINT},   {"HUP", SIGHUP},  {"QUIT", SIGQUIT},
      {"KILL", SIGKILL}, {"USR1", SIGUSR1}, {"USR2", SIGUSR2}};
  std::string t = text;
  for (auto& ch : t) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  if (t.rfind("SIG", 0) == 0) t = t.substr(3);
  for (const auto& [name, num] : kNames)
    if (t == name) return num;
  if (!t.empty() && t.find_first_not_of("0123456789") == std::string::npos && t.size() < 3) {
    const int n = std::stoi(t);
    if (n >= 1 && n < NSIG) return n;
  }
  return make_error(ErrorKind::usage, "--stop-signal: unknown signal '" + text +
                                          "' (use TERM, INT, HUP, QUIT, USR1, USR2, KILL or a number)");
}

std::string signal_name(int sig) {
  switch (sig) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    case SIGHUP:
      return "SIGHUP";
    case SIGQUIT:
      return "SIGQUIT";
    case SIGKILL:
      return "SIGKILL";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGUSR2:
      return "SIGUSR2";
    default:
      return "signal " + std::to_string(sig);
  }
}

}  // namespace gm::sys
