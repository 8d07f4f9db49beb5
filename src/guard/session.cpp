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
#include <nlohmann/json.hpp>

#include "util/json.h"

namespace gm {
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

/// Writes the run's status for the job (GPUMETER_STATUS_FILE, docs/run.md "Spend so far"): a temporary file
/// renamed over the last one, so a reader never sees half of it. Failures are ignored: the file is a
/// convenience for the job, never a reason to disturb it.
void write_status_file(const std::string& path, const StatusSnapshot& s, std::int64_t run_id,
                       std::int64_t unix_ms) {
  nlohmann::json j;
  j["version"] = 1;
  j["run_id"] = run_id;
  j["written_unix_ms"] = unix_ms;
  j["elapsed_s"] = s.elapsed_s;
  j["spent_micros"] = json_or_null(s.spent_micros);
  j["spent_usd"] = s.spent_micros ? nlohmann::json(micros_to_usd(*s.spent_micros)) : nlohmann::json(nullptr);
  j["burn_usd_per_s"] =
      s.burn_usd_per_h ? nlohmann::json(usd_per_s_of_hourly(*s.burn_usd_per_h)) : nlohmann::json(nullptr);
  j["budget_left_usd"] =
      s.budget_left_micros ? nlohmann::json(micros_to_usd(*s.budget_left_micros)) : nlohmann::json(nullptr);
  j["step"] = json_or_null(s.step);
  j["total_steps"] = json_or_null(s.total_steps);
  j["forecast_usd"] = s.forecast ? nlohmann::json(s.forecast->total_usd) : nlohmann::json(nullptr);
  j["stopping"] = s.stopping;
  if (s.target) {
    // --target: what the job (the Optuna callback) can act on.
    const TargetForecast& f = s.target->forecast;
    auto num = [](const std::optional<double>& v) {
      return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
    };
    j["target"] = {{"metric", s.target->target.metric},
                   {"op", s.target->target.at_most ? "<=" : ">="},
                   {"value", s.target->target.threshold},
                   {"verdict", std::string(verdict_name(f.verdict))},
                   {"current_value", num(f.current_value)},
                   {"reached_at_step", num(f.reached_at_step)},
                   {"cost_to_reach_usd", num(f.cost_to_reach_usd)},
                   {"low_usd", num(f.low_usd)},
                   {"high_usd", num(f.high_usd)}};
  }
  const std::string text = j.dump() + "\n";
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return;
  write_all(fd, text);
  ::close(fd);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) unlink(tmp.c_str());
}

}  // namespace

Result<SessionOutcome> run_session(const SessionConfig& cfg, GpuBackend* backend, Ledger* ledger,
                                   const Catalog* catalog, Clock& clock, ProcessRunner& runner,
                                   SessionSink& sink) {
  ProgressSocket sock;
  if (auto r = sock.open(); !r) return r.error();
  Supervisor sup(cfg, backend, ledger, catalog, clock, runner, sink);
  const std::int64_t run_id = sup.begin();
  SignalPipe signals;
  if (auto r = signals.install(); !r) return r.error();
  sink.session_started(run_id, sock.path, clock.unix_ms());

  SpawnOptions so;
  so.argv = cfg.argv;
  so.env["GPUMETER_SOCKET"] = sock.path;
  so.env["GPUMETER_RUN_ID"] = std::to_string(run_id);
  const std::string status_path = sock.dir + "/status.json";
  write_status_file(status_path, sup.snapshot(), run_id, clock.unix_ms());
  so.env["GPUMETER_STATUS_FILE"] = status_path;
  so.use_pty = cfg.use_pty;
  so.window = cfg.window;
  auto spawned = runner.spawn(so);
  if (!spawned) {
    sup.start_failed(spawned.error());
    return sup.finish();
  }
  SpawnedChild child = *spawned;
  sup.started(child.pid);
  sink.job_started();

  std::int64_t drain_deadline_ns = 0;
  bool stdin_open = cfg.use_pty;
  std::vector<int> outputs;
  for (int fd : {child.stdout_fd, child.stderr_fd, child.pty_fd})
    if (fd >= 0) outputs.push_back(fd);

  while (true) {
    std::int64_t now = clock.monotonic_ns();
    if (!sup.done() && now >= sup.next_wake_ns()) {
      if (cfg.inference)
        if (auto scrape = cfg.inference->take(runner.job_pids(child.pid))) sup.on_inference(*scrape);
      sup.on_time();
      write_status_file(status_path, sup.snapshot(), run_id, clock.unix_ms());
    }
    if (sup.done() && (outputs.empty() || now >= drain_deadline_ns)) break;

    std::vector<pollfd> fds;
    fds.push_back({g_signal_pipe[0], POLLIN, 0});
    fds.push_back({sock.fd, POLLIN, 0});
    for (int fd : outputs) fds.push_back({fd, POLLIN, 0});
    if (stdin_open && !sup.done()) fds.push_back({STDIN_FILENO, POLLIN, 0});
    const int notice_fd = cfg.notices && !sup.done() ? cfg.notices->wake_fd() : -1;
    if (notice_fd >= 0) fds.push_back({notice_fd, POLLIN, 0});
    const std::int64_t wake = sup.done() ? drain_deadline_ns : sup.next_wake_ns();
    const int timeout_ms =
        static_cast<int>(std::clamp<std::int64_t>((wake - now + 999'999) / 1'000'000, 0, 1000));
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
            if (cfg.use_pty && child.pty_fd >= 0)
              if (auto w = sink.resized(); w) set_pty_window(child.pty_fd, w->first, w->second);
            continue;
          }
          sup.on_signal(s);  // forward INT / TERM / HUP / QUIT
        }
      } else if (p.fd == sock.fd) {
        char buf[65536];
        // A bounded batch per wake-up: a job flooding the socket must not starve its own output.
        for (int batch = 0; batch < 256; ++batch) {
          const ssize_t n = recv(sock.fd, buf, sizeof buf, 0);
          if (n < 0) break;
          sup.on_datagram(std::string_view(buf, static_cast<std::size_t>(n)));
        }
      } else if (p.fd == STDIN_FILENO) {
        char buf[4096];
        const ssize_t n = read(STDIN_FILENO, buf, sizeof buf);
        if (n <= 0) {
          stdin_open = false;
          // End of gpumeter's input: the job reading its terminal sees end-of-file (^D at a line start).
          if (!isatty(STDIN_FILENO) && child.pty_fd >= 0) write_all(child.pty_fd, "\x04");
        } else {
          write_all(child.pty_fd, std::string_view(buf, static_cast<std::size_t>(n)));
        }
      } else {
        char chunk[65536];
        const ssize_t n = read(p.fd, chunk, sizeof chunk);
        if (n <= 0) {
          close(p.fd);
          outputs.erase(std::remove(outputs.begin(), outputs.end(), p.fd), outputs.end());
          if (p.fd == child.stdout_fd) child.stdout_fd = -1;
          if (p.fd == child.stderr_fd) child.stderr_fd = -1;
          if (p.fd == child.pty_fd) child.pty_fd = -1;
          continue;
        }
        sup.on_output(p.fd == child.stderr_fd ? JobStream::err : JobStream::out,
                      std::string_view(chunk, static_cast<std::size_t>(n)));
      }
    }
    if (!sup.done()) {
      if (auto status = runner.try_wait(child.pid)) {
        // Datagrams the job sent before it exited (its last gpumeter.checkpoint()) count before the end.
        char buf[65536];
        for (int batch = 0; batch < 256; ++batch) {
          const ssize_t n = recv(sock.fd, buf, sizeof buf, 0);
          if (n < 0) break;
          sup.on_datagram(std::string_view(buf, static_cast<std::size_t>(n)));
        }
        if (cfg.notices)
          for (const auto& n : cfg.notices->take()) sup.on_notice(n);
        sup.on_exit(*status);
        // Output still in flight is copied; a background grandchild holding the pipe open does not hold us.
        drain_deadline_ns = clock.monotonic_ns() + 300'000'000;
      }
    }
  }
  for (int fd : outputs) close(fd);
  if (child.owns_terminal) restore_terminal_foreground();
  return sup.finish();
}

Result<SessionOutcome> attach_session(const SessionConfig& cfg, pid_t pid, GpuBackend* backend,
                                      Ledger* ledger, const Catalog* catalog, Clock& clock,
                                      WatchedProcessRunner& runner, SessionSink& sink) {
  ProgressSocket sock;
  if (auto r = sock.open(); !r) return r.error();
  Supervisor sup(cfg, backend, ledger, catalog, clock, runner, sink);
  const std::int64_t run_id = sup.begin();
  SignalPipe signals;
  if (auto r = signals.install(); !r) return r.error();
  sup.started(pid);
  sink.session_started(run_id, sock.path, clock.unix_ms() - cfg.started_ago_ms);
  sink.job_started();
  if (auto status = runner.try_wait(pid)) sup.on_exit(*status);  // gone before the first poll

  while (!sup.done()) {
    const std::int64_t now = clock.monotonic_ns();
    if (now >= sup.next_wake_ns()) sup.on_time();
    std::vector<pollfd> fds;
    fds.push_back({g_signal_pipe[0], POLLIN, 0});
    fds.push_back({sock.fd, POLLIN, 0});
    if (runner.end_fd() >= 0) fds.push_back({runner.end_fd(), POLLIN, 0});
    const int notice_fd = cfg.notices && !sup.done() ? cfg.notices->wake_fd() : -1;
    if (notice_fd >= 0) fds.push_back({notice_fd, POLLIN, 0});
    const int timeout_ms = static_cast<int>(
        std::clamp<std::int64_t>((sup.next_wake_ns() - clock.monotonic_ns() + 999'999) / 1'000'000, 0, 1000));
    const int pr = poll(fds.data(), fds.size(), timeout_ms);
    if (pr < 0 && errno != EINTR) break;
    for (const auto& p : fds) {
      if (!(p.revents & (POLLIN | POLLHUP | POLLERR))) continue;
      if (p.fd == notice_fd) {
        for (const auto& n : cfg.notices->take()) sup.on_notice(n);
      } else if (p.fd == g_signal_pipe[0]) {
        unsigned char sigs[64];
        const ssize_t n = read(p.fd, sigs, sizeof sigs);
        for (ssize_t i = 0; i < n; ++i)
          if (sigs[i] == SIGINT || sigs[i] == SIGTERM || sigs[i] == SIGHUP || sigs[i] == SIGQUIT)
            sup.on_detach();
      } else if (p.fd == sock.fd) {
        char buf[65536];
        for (int batch = 0; batch < 256; ++batch) {
          const ssize_t n = recv(sock.fd, buf, sizeof buf, 0);
          if (n < 0) break;
          sup.on_datagram(std::string_view(buf, static_cast<std::size_t>(n)));
        }
      }
    }
    if (!sup.done())
      if (auto status = runner.try_wait(pid)) sup.on_exit(*status);
  }
  return sup.finish();
}

}  // namespace gm
