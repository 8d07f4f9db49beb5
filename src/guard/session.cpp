// The driver of `gpumeter run`: starts the job and turns its descriptors (output, the progress socket,
// signals, stdin in pty mode) into Supervisor events. Nothing here draws or prints: output goes to the sink.
#include "guard/session.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>

#include "guard/snapshot.h"
#include "guard/supervisor.h"

namespace gm::guard {
namespace {

int g_signal_pipe[2] = {-1, -1};
constexpr int kHandledSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGWINCH, SIGQUIT};

void on_signal(int sig) {
  const int saved = errno;
  const unsigned char b = static_cast<unsigned char>(sig);
  ssize_t ignored = write(g_signal_pipe[1], &b, 1);
  (void)ignored;
  errno = saved;
}

/// Signals arrive as bytes on a self-pipe while this is alive (one session per process at a time).
struct SignalPipe {
  bool open = false;
  Result<void> install() {
    if (pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
      return make_error(std::string("pipe: ") + std::strerror(errno));
    open = true;
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (int s : kHandledSignals) sigaction(s, &sa, nullptr);
    signal(SIGPIPE, SIG_IGN);
    return ok_result();
  }
  ~SignalPipe() {
    if (!open) return;
    for (int s : kHandledSignals) signal(s, SIG_DFL);
    close(g_signal_pipe[0]);
    close(g_signal_pipe[1]);
  }
};

/// The private progress socket: a 0700 directory holding a datagram socket.
struct ProgressSocket {
  std::string dir, path;
  int fd = -1;
  ~ProgressSocket() {
    if (fd >= 0) close(fd);
    if (!path.empty()) unlink(path.c_str());
    if (!dir.empty()) {
      unlink((dir + "/status.json").c_str());
      unlink((dir + "/status.json.tmp").c_str());
      rmdir(dir.c_str());
    }
  }
  Result<void> open() {
    const char* runtime = std::getenv("XDG_RUNTIME_DIR");
    std::string base = runtime && *runtime ? runtime : "/tmp";
    std::string tmpl = base + "/gpumeter-XXXXXX";
    if (!mkdtemp(tmpl.data())) {
      tmpl = "/tmp/gpumeter-XXXXXX";
      if (!mkdtemp(tmpl.data()))
        return make_error(std::string("progress socket directory: ") + std::strerror(errno));
    }
    dir = tmpl;
    chmod(dir.c_str(), 0700);
    path = dir + "/progress.sock";
    fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return make_error(std::string("progress socket: ") + std::strerror(errno));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.size() >= sizeof addr.sun_path) return make_error("progress socket path too long: " + path);
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
      return make_error("progress socket " + path + ": " + std::strerror(errno));
    int size = 1 << 20;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
    return ok_result();
  }
};

/// The job as the poll loop watches it: its main process and, for a job gpumeter started, its descriptors.
struct WatchedJob {
  pid_t pid = -1;
  sys::SpawnedChild* child = nullptr;  ///< null: attached (no output, no stdin, no pty)
  int end_fd = -1;                ///< readable when an attached process ended (-1: none)
  std::string status_path;        ///< GPUMETER_STATUS_FILE ("" : none)
  std::int64_t run_id = 0;
};

/// Reads the datagrams waiting on the progress socket: a bounded batch, so a job flooding the socket does
/// not starve its own output.
void read_datagrams(int fd, Supervisor& sup) {
  char buf[65536];
  for (int batch = 0; batch < 256; ++batch) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n < 0) break;
    sup.on_datagram(std::string_view(buf, static_cast<std::size_t>(n)));
  }
}

/// The one poll loop of run and attach: descriptors (signals, the progress socket, the job's output, stdin
/// in pty mode, the notice watcher, an attached process's end) into Supervisor events, until the job ended
/// and its output is drained.
void poll_loop(const SessionConfig& cfg, Supervisor& sup, const ProgressSocket& sock, WatchedJob& job,
               util::Clock& clock, sys::ProcessRunner& runner, SessionSink& sink) {
  sys::SpawnedChild* child = job.child;
  std::int64_t drain_deadline_ns = 0;
  bool stdin_open = child && cfg.use_pty;
  std::vector<int> outputs;
  if (child)
    for (int fd : {child->stdout_fd, child->stderr_fd, child->pty_fd})
      if (fd >= 0) outputs.push_back(fd);

  while (true) {
    const std::int64_t now = clock.monotonic_ns();
    if (!sup.done() && now >= sup.next_wake_ns()) {
      if (cfg.inference)
        if (auto scrape = cfg.inference->take(runner.job_pids(job.pid))) sup.on_inference(*scrape);
      sup.on_time();
      if (!job.status_path.empty())
        guard::write_status_file(job.status_path, sup.snapshot(), job.run_id, clock.unix_ms());
    }
    if (sup.done() && (outputs.empty() || now >= drain_deadline_ns)) break;

    std::vector<pollfd> fds;
    fds.push_back({g_signal_pipe[0], POLLIN, 0});
    fds.push_back({sock.fd, POLLIN, 0});
    for (int fd : outputs) fds.push_back({fd, POLLIN, 0});
    if (stdin_open && !sup.done()) fds.push_back({STDIN_FILENO, POLLIN, 0});
    if (job.end_fd >= 0 && !sup.done()) fds.push_back({job.end_fd, POLLIN, 0});
    const int notice_fd = cfg.notices && !sup.done() ? cfg.notices->wake_fd() : -1;
    if (notice_fd >= 0) fds.push_back({notice_fd, POLLIN, 0});
    const std::int64_t wake = sup.done() ? drain_deadline_ns : sup.next_wake_ns();
    const int timeout_ms = static_cast<int>(
        std::clamp<std::int64_t>((wake - clock.monotonic_ns() + 999'999) / 1'000'000, 0, 1000));
    const int pr = poll(fds.data(), fds.size(), timeout_ms);
    if (pr < 0 && errno != EINTR) break;
    for (const auto& p : fds) {
      if (!(p.revents & (POLLIN | POLLHUP | POLLERR))) continue;
      if (p.fd == notice_fd) {
        // A notice from the metadata watcher's thread: acted on now, not at the next tick.
        for (const auto& n : cfg.notices->take()) sup.on_notice(n);
      } else if (p.fd == g_signal_pipe[0]) {
        unsigned char sigs[64];
        const ssize_t n = read(p.fd, sigs, sizeof sigs);
        for (ssize_t i = 0; i < n; ++i) {
          const int s = sigs[i];
          if (s == SIGCHLD) continue;
          if (s == SIGWINCH) {
            if (child && cfg.use_pty && child->pty_fd >= 0)
              if (auto w = sink.resized(); w) sys::set_pty_window(child->pty_fd, w->first, w->second);
            continue;
          }
          // INT / TERM / HUP / QUIT: forwarded to a job gpumeter started; an attached one is let go.
          if (cfg.attached)
            sup.on_detach();
          else
            sup.on_signal(s);
        }
      } else if (p.fd == sock.fd) {
        read_datagrams(sock.fd, sup);
      } else if (p.fd == job.end_fd) {
        continue;  // the process ended: try_wait below says so
      } else if (p.fd == STDIN_FILENO) {
        char buf[4096];
        const ssize_t n = read(STDIN_FILENO, buf, sizeof buf);
        if (n <= 0) {
          stdin_open = false;
          // End of gpumeter's input: the job reading its terminal sees end-of-file (^D at a line start).
          if (!isatty(STDIN_FILENO) && child->pty_fd >= 0) sys::write_all(child->pty_fd, "\x04");
        } else {
          sys::write_all(child->pty_fd, std::string_view(buf, static_cast<std::size_t>(n)));
        }
      } else {
        char chunk[65536];
        const ssize_t n = read(p.fd, chunk, sizeof chunk);
        if (n <= 0) {
          close(p.fd);
          outputs.erase(std::remove(outputs.begin(), outputs.end(), p.fd), outputs.end());
          if (p.fd == child->stdout_fd) child->stdout_fd = -1;
          if (p.fd == child->stderr_fd) child->stderr_fd = -1;
          if (p.fd == child->pty_fd) child->pty_fd = -1;
          continue;
        }
        sup.on_output(p.fd == child->stderr_fd ? JobStream::err : JobStream::out,
                      std::string_view(chunk, static_cast<std::size_t>(n)));
      }
    }
    if (!sup.done()) {
      if (auto status = runner.try_wait(job.pid)) {
        // Datagrams the job sent before it exited (its last gpumeter.checkpoint()) count before the end.
        read_datagrams(sock.fd, sup);
        if (cfg.notices)
          for (const auto& n : cfg.notices->take()) sup.on_notice(n);
        sup.on_exit(*status);
        // Output still in flight is copied; a background grandchild holding the pipe open does not hold us.
        drain_deadline_ns = clock.monotonic_ns() + 300'000'000;
      }
    }
  }
  for (int fd : outputs) close(fd);
}

/// What run and attach set up alike: the progress socket, the supervisor with its run opened, and the
/// signal self-pipe.
struct Session {
  ProgressSocket sock;
  std::optional<Supervisor> sup;
  SignalPipe signals;
  std::int64_t run_id = 0;
  Result<void> open(const SessionConfig& cfg, gpu::GpuBackend* backend, store::Ledger* ledger,
                    const catalog::Catalog* catalog, util::Clock& clock, sys::ProcessRunner& runner,
                    SessionSink& sink) {
    GM_TRY_VOID(sock.open());
    sup.emplace(cfg, backend, ledger, catalog, clock, runner, sink);
    run_id = sup->begin();
    return signals.install();
  }
};

}  // namespace

Result<SessionOutcome> run_session(const SessionConfig& cfg, gpu::GpuBackend* backend, store::Ledger* ledger,
                                   const catalog::Catalog* catalog, util::Clock& clock,
                                   sys::ProcessRunner& runner, SessionSink& sink) {
  Session session;
  GM_TRY_VOID(session.open(cfg, backend, ledger, catalog, clock, runner, sink));
  Supervisor& sup = *session.sup;
  const ProgressSocket& sock = session.sock;
  const std::int64_t run_id = session.run_id;
  sink.session_started(run_id, sock.path, clock.unix_ms());

  sys::SpawnOptions so;
  so.argv = cfg.argv;
  so.env["GPUMETER_SOCKET"] = sock.path;
  so.env["GPUMETER_RUN_ID"] = std::to_string(run_id);
  WatchedJob job;
  job.run_id = run_id;
  job.status_path = sock.dir + "/status.json";
  guard::write_status_file(job.status_path, sup.snapshot(), run_id, clock.unix_ms());
  so.env["GPUMETER_STATUS_FILE"] = job.status_path;
  so.use_pty = cfg.use_pty;
  so.window = cfg.window;
  auto spawned = runner.spawn(so);
  if (!spawned) {
    sup.start_failed(spawned.error());
    return sup.finish();
  }
  sys::SpawnedChild child = *spawned;
  sup.started(child.pid);
  sink.job_started();
  job.pid = child.pid;
  job.child = &child;
  poll_loop(cfg, sup, sock, job, clock, runner, sink);
  if (child.owns_terminal) sys::restore_terminal_foreground();
  return sup.finish();
}

Result<SessionOutcome> attach_session(const SessionConfig& cfg, pid_t pid, gpu::GpuBackend* backend,
                                      store::Ledger* ledger, const catalog::Catalog* catalog,
                                      util::Clock& clock, sys::WatchedProcessRunner& runner,
                                      SessionSink& sink) {
  Session session;
  GM_TRY_VOID(session.open(cfg, backend, ledger, catalog, clock, runner, sink));
  Supervisor& sup = *session.sup;
  const ProgressSocket& sock = session.sock;
  const std::int64_t run_id = session.run_id;
  sup.started(pid);
  sink.session_started(run_id, sock.path, clock.unix_ms() - cfg.started_ago_ms);
  sink.job_started();
  if (auto status = runner.try_wait(pid)) sup.on_exit(*status);  // gone before the first poll
  WatchedJob job;
  job.pid = pid;
  job.end_fd = runner.end_fd();
  poll_loop(cfg, sup, sock, job, clock, runner, sink);
  return sup.finish();
}

}  // namespace gm::guard
