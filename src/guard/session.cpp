#include "guard/session.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include "guard/run_meter.h"
#include "sys/proc.h"
#include "util/exit_codes.h"
#include "util/units.h"

namespace gm {
namespace {

int g_signal_pipe[2] = {-1, -1};

void on_signal(int sig) {
  const int saved = errno;
  const unsigned char b = static_cast<unsigned char>(sig);
  ssize_t ignored = write(g_signal_pipe[1], &b, 1);
  (void)ignored;
  errno = saved;
}

void write_all(int fd, const char* data, std::size_t n) {
  while (n > 0) {
    const ssize_t w = write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        pollfd p{fd, POLLOUT, 0};
        poll(&p, 1, 100);
        continue;
      }
      return;  // stdout closed: drop (the job's own view is unaffected)
    }
    data += w;
    n -= static_cast<std::size_t>(w);
  }
}

/// The private progress socket: a 0700 directory holding a datagram socket.
struct ProgressSocket {
  std::string dir, path;
  int fd = -1;
  ~ProgressSocket() {
    if (fd >= 0) close(fd);
    if (!path.empty()) unlink(path.c_str());
    if (!dir.empty()) rmdir(dir.c_str());
  }
  Result<void> open() {
    const char* runtime = std::getenv("XDG_RUNTIME_DIR");
    std::string base = runtime && *runtime ? runtime : "/tmp";
    std::string tmpl = base + "/gpumeter-XXXXXX";
    if (!mkdtemp(tmpl.data())) {
      tmpl = "/tmp/gpumeter-XXXXXX";
      if (!mkdtemp(tmpl.data())) return make_error(std::string("progress socket directory: ") + std::strerror(errno));
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

/// A reserved bottom line on the terminal (scroll region above it), as apt does.
class StatusLine {
 public:
  void start(unsigned short rows) {
    rows_ = rows;
    if (rows_ < 3) return;
    const std::string s = fmt::format("\n\0337\033[1;{}r\0338\033[1A", rows_ - 1);
    write_all(STDOUT_FILENO, s.data(), s.size());
    active_ = true;
  }
  void resize(unsigned short rows) {
    if (!active_) return;
    rows_ = rows;
    const std::string s = fmt::format("\0337\033[1;{}r\0338", rows_ - 1);
    write_all(STDOUT_FILENO, s.data(), s.size());
  }
  void draw(const std::string& text, unsigned short cols) {
    if (!active_) return;
    std::string t = text;
    if (t.size() > cols) t.resize(cols);
    const std::string s = fmt::format("\0337\033[{};1H\033[2K\033[7m{}\033[0m\0338", rows_, t);
    write_all(STDOUT_FILENO, s.data(), s.size());
  }
  void stop() {
    if (!active_) return;
    const std::string s = fmt::format("\0337\033[1;{}r\033[{};1H\033[2K\0338", rows_, rows_);
    write_all(STDOUT_FILENO, s.data(), s.size());
    active_ = false;
  }
  bool active() const { return active_; }

 private:
  unsigned short rows_ = 0;
  bool active_ = false;
};

struct RawTerminal {
  termios saved{};
  bool active = false;
  void enter() {
    if (!isatty(STDIN_FILENO) || tcgetattr(STDIN_FILENO, &saved) != 0) return;
    termios raw = saved;
    cfmakeraw(&raw);
    if (tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0) active = true;
  }
  ~RawTerminal() {
    if (active) tcsetattr(STDIN_FILENO, TCSANOW, &saved);
  }
};

class Supervisor {
 public:
  Supervisor(const SessionConfig& c, GpuBackend& b, Ledger* l, const Catalog* cat, Clock& clk, ProcessRunner& r)
      : cfg_(c), backend_(b), ledger_(l), catalog_(cat), clock_(clk), runner_(r), guard_(c.guard) {}

  Result<SessionOutcome> run();

 private:
  void warn(const std::string& msg) {
    outcome_.warnings.push_back(msg);
    const std::string line = "gpumeter: warning: " + msg + (cfg_.use_pty ? "\r\n" : "\n");
    write_all(STDERR_FILENO, line.data(), line.size());
  }
  void say(const std::string& msg) {
    if (cfg_.quiet) return;
    const std::string line =
        std::string(cfg_.simulated ? "SIMULATED " : "") + "gpumeter: " + msg + (cfg_.use_pty ? "\r\n" : "\n");
    write_all(STDERR_FILENO, line.data(), line.size());
  }
  void ledger_failed(const Error& e) {
    warn("ledger write failed, the rest of this run is not recorded: " + e.message);
    ledger_ = nullptr;
    outcome_.recorded = false;
  }
  std::int64_t elapsed_ms(std::int64_t now_ns) const { return (now_ns - start_ns_) / 1'000'000; }
  void on_progress(const ProgressUpdate& u, std::int64_t now_ns);
  void tick(std::int64_t now_ns, bool evaluate_guard = true);
  void record_action(const std::string& kind, const std::string& message, std::int64_t now_ns);
  void notify(const GuardEvent& e);
  void flush(bool final);
  void update_totals(std::int64_t now_ns);
  std::string status_text(std::int64_t now_ns) const;

  const SessionConfig& cfg_;
  GpuBackend& backend_;
  Ledger* ledger_;
  const Catalog* catalog_;
  Clock& clock_;
  ProcessRunner& runner_;
  BudgetGuard guard_;
  Forecaster forecaster_;
  OutputProgressParser out_parser_, err_parser_;
  ProcReader proc_;
  StatusLine status_;
  std::optional<RunMeter> meter_;
  SessionOutcome outcome_;
  RunRecord run_;
  SpawnedChild child_;
  std::int64_t start_ns_ = 0;
  std::vector<SampleRecord> pending_samples_;
  std::vector<ProgressRecord> pending_progress_;
  std::vector<ActionRecord> pending_actions_;
  std::vector<ActionRecord> all_actions_;
  std::int64_t end_ns_ = 0;
  std::map<std::pair<std::int64_t, unsigned>, RollupRecord> rollups_;
  std::set<std::pair<std::int64_t, unsigned>> dirty_rollups_;
  std::optional<ProgressRecord> latest_progress_;
  std::optional<Forecast> forecast_;
  std::int64_t malformed_ = 0;
  std::vector<std::thread> notifiers_;
  bool stopping_ = false;
  bool killed_ = false;
  std::int64_t kill_deadline_ns_ = 0;
  std::optional<std::pair<unsigned short, unsigned short>> window_;
  std::int64_t last_status_every_ns_ = 0;
};

void Supervisor::on_progress(const ProgressUpdate& u, std::int64_t now_ns) {
  if (u.empty()) return;
  const double t_s = static_cast<double>(now_ns - start_ns_) / 1e9;
  std::optional<std::int64_t> total = u.total_steps ? u.total_steps : cfg_.run.total_steps;
  if (u.step) forecaster_.add(t_s, *u.step, total);
  ProgressRecord p;
  if (latest_progress_) p = *latest_progress_;  // fields not in this update keep their last value
  p.run_id = run_.id;
  p.t_ms = elapsed_ms(now_ns);
  if (u.step) p.step = u.step;
  if (total) p.total_steps = total;
  if (u.samples) p.samples = u.samples;
  if (u.tokens) p.tokens = u.tokens;
  for (const auto& [k, v] : u.metrics) p.metrics[k] = v;
  p.cost_micros = meter_->spent_at(now_ns);
  latest_progress_ = p;
  // At most one stored point per second per source burst: replace a pending point of the same second.
  if (!pending_progress_.empty() && pending_progress_.back().t_ms / 1000 == p.t_ms / 1000) pending_progress_.back() = p;
  else pending_progress_.push_back(p);
}

void Supervisor::notify(const GuardEvent& e) {
  if (cfg_.notify_command) {
    notifiers_.emplace_back([cmd = *cfg_.notify_command, e] {
      auto r = run_notify_command(cmd, e);
      if (!r) std::fprintf(stderr, "gpumeter: warning: %s\n", r.error().message.c_str());
    });
  }
  if (cfg_.webhook_url) {
    notifiers_.emplace_back([url = *cfg_.webhook_url, e] {
      auto r = post_webhook(url, e);
      if (!r) std::fprintf(stderr, "gpumeter: warning: %s\n", r.error().message.c_str());
    });
  }
}

void Supervisor::record_action(const std::string& kind, const std::string& message, std::int64_t now_ns) {
  const MicroUsd spent = meter_->spent_at(now_ns);
  pending_actions_.push_back(ActionRecord{run_.id, elapsed_ms(now_ns), kind, spent, message});
  all_actions_.push_back(pending_actions_.back());
  say(fmt::format("[{}] {}", kind, message));
  GuardEvent e;
  e.run_id = run_.id;
  e.kind = kind;
  e.message = message;
  e.cost_usd = micros_to_usd(spent);
  e.budget_usd = cfg_.guard.budget_usd;
  if (forecast_) e.forecast_usd = forecast_->total_usd;
  e.command = run_.command;
  e.host = run_.host;
  notify(e);
}

void Supervisor::update_totals(std::int64_t now_ns) {
  run_.wall_ms = elapsed_ms(now_ns);
  run_.billed_s = billed_seconds(run_.wall_ms, cfg_.price.billing);
  run_.cost_micros = meter_->spent_micros();
  MicroUsd idle = 0;
  for (const auto& g : meter_->usage())
    if (g.used) idle += g.idle_cost_micros;
  run_.idle_cost_micros = idle;
  run_.gpus_used = meter_->used_uuids();
  run_.energy_j = meter_->energy_j();
  run_.energy_method = meter_->energy_method();
  if (forecast_) run_.forecast_cost_usd = forecast_->total_usd;
  if (latest_progress_) {
    run_.steps = latest_progress_->step;
    run_.samples_done = latest_progress_->samples;
    run_.tokens_done = latest_progress_->tokens;
    if (latest_progress_->total_steps) run_.total_steps = latest_progress_->total_steps;
  }
}

void Supervisor::flush(bool final) {
  if (!ledger_) {
    pending_samples_.clear();
    pending_progress_.clear();
    pending_actions_.clear();
    return;
  }
  if (auto r = ledger_->append(pending_samples_, pending_progress_, pending_actions_); !r) return ledger_failed(r.error());
  pending_samples_.clear();
  pending_progress_.clear();
  pending_actions_.clear();
  if (final || dirty_rollups_.size() > 0) {
    std::vector<RollupRecord> rs;
    for (const auto& k : dirty_rollups_) rs.push_back(rollups_[k]);
    if (auto r = ledger_->append_rollups(rs); !r) return ledger_failed(r.error());
    dirty_rollups_.clear();
    // Minutes that are complete are never touched again.
    const std::int64_t current = clock_.unix_ms() / 60'000;
    for (auto it = rollups_.begin(); it != rollups_.end();) it = it->first.first < current ? rollups_.erase(it) : std::next(it);
  }
  if (auto r = ledger_->update_run(run_); !r) return ledger_failed(r.error());
}

std::string Supervisor::status_text(std::int64_t now_ns) const {
  const double elapsed_s = static_cast<double>(now_ns - start_ns_) / 1e9;
  const double spent = micros_to_usd(meter_->spent_at(now_ns));
  std::string s = cfg_.simulated ? "SIMULATED · " : "";
  s += fmt::format("gpumeter {} · {} · {}/h", format_duration_s(elapsed_s), format_usd(spent),
                   format_usd(meter_->burn_usd_per_s() * 3600.0));
  if (latest_progress_ && latest_progress_->step) {
    s += fmt::format(" · step {}", *latest_progress_->step);
    if (latest_progress_->total_steps) s += fmt::format("/{}", *latest_progress_->total_steps);
  }
  if (forecast_) {
    s += fmt::format(" · forecast {} [{}–{}] ETA {}", format_usd(forecast_->total_usd), format_usd(forecast_->low_usd),
                     format_usd(forecast_->high_usd), format_duration_s(forecast_->remaining_s));
  }
  if (cfg_.guard.budget_usd) s += fmt::format(" · budget left {}", format_usd(*cfg_.guard.budget_usd - spent));
  for (const auto& d : meter_->latest()) {
    s += fmt::format(" · GPU{} ", d.index);
    s += d.utilization_pct ? fmt::format("{}%", *d.utilization_pct) : "n/a";
    if (d.memory_used_bytes) s += " " + format_bytes(*d.memory_used_bytes);
    if (d.power_mw) s += fmt::format(" {:.0f}W", *d.power_mw / 1000.0);
  }
  if (stopping_) s += " · STOPPING";
  return s;
}

void Supervisor::tick(std::int64_t now_ns, bool evaluate_guard) {
  std::set<std::uint32_t> pids{static_cast<std::uint32_t>(child_.pid)};
  for (auto p : proc_.descendants(static_cast<std::uint32_t>(child_.pid))) pids.insert(p);
  auto samples = meter_->tick(now_ns, pids);
  const std::int64_t minute = clock_.unix_ms() / 60'000;
  for (auto& s : samples) {
    s.run_id = run_.id;
    auto key = std::make_pair(minute, s.gpu_index);
    RollupRecord& r = rollups_[key];
    r.run_id = run_.id;
    r.minute_unix = minute;
    r.gpu_index = s.gpu_index;
    ++r.samples;
    r.utilization_sum_pct += s.utilization_pct.value_or(0);
    if (s.memory_used_bytes) r.memory_max_bytes = std::max(r.memory_max_bytes, static_cast<double>(*s.memory_used_bytes));
    r.energy_j += s.energy_j;
    r.cost_micros += s.cost_micros;
    dirty_rollups_.insert(key);
    pending_samples_.push_back(s);
  }
  const MicroUsd spent = meter_->spent_micros();
  forecast_ = forecaster_.forecast(static_cast<double>(now_ns - start_ns_) / 1e9, micros_to_usd(spent),
                                   meter_->burn_usd_per_s());
  GuardInput in;
  in.elapsed_ms = elapsed_ms(now_ns);
  in.spent_micros = spent;
  in.forecast = forecast_;
  in.forecast_intervals = forecaster_.intervals();
  in.idle_for_ms = meter_->idle_for_ms(now_ns);
  for (const auto& d : evaluate_guard ? guard_.evaluate(in) : std::vector<GuardDecision>{}) {
    record_action(d.kind, d.message, now_ns);
    if (!d.stopped_by.empty() && !stopping_) {
      stopping_ = true;
      run_.stopped_by = d.stopped_by;
      kill(-child_.pid, cfg_.stop_signal);
      record_action(to_lower(signal_name(cfg_.stop_signal)),
                    fmt::format("sent {} to the job's process group; {} grace before SIGKILL", signal_name(cfg_.stop_signal),
                                format_duration_s(static_cast<double>(cfg_.grace_ms) / 1000.0)),
                    now_ns);
      kill_deadline_ns_ = now_ns + cfg_.grace_ms * 1'000'000;
    }
  }
  update_totals(now_ns);
  flush(false);
  if (status_.active() && window_) status_.draw(status_text(now_ns), window_->second);
  if (cfg_.status_every_ms && now_ns - last_status_every_ns_ >= *cfg_.status_every_ms * 1'000'000) {
    last_status_every_ns_ = now_ns;
    const std::string line = status_text(now_ns) + (cfg_.use_pty ? "\r\n" : "\n");
    write_all(STDERR_FILENO, line.data(), line.size());
  }
}

Result<SessionOutcome> Supervisor::run() {
  ProgressSocket sock;
  if (auto r = sock.open(); !r) return r.error();
  run_ = cfg_.run;
  run_.status = "running";
  run_.price_micros_per_gpu_hour = cfg_.price.micros_per_gpu_hour;
  run_.price_source = cfg_.price.source;
  run_.provider = cfg_.price.provider;
  run_.region = cfg_.price.region;
  run_.billing_granularity_s = cfg_.price.billing.granularity_s;
  run_.billing_minimum_s = cfg_.price.billing.minimum_s;
  run_.budget_usd = cfg_.guard.budget_usd;
  run_.start_unix_ms = clock_.unix_ms();
  run_.energy_method = "none";
  for (unsigned idx : cfg_.allocated)
    for (const auto& d : backend_.devices())
      if (d.index == idx) run_.gpus_allocated.push_back(d.uuid);
  if (ledger_) {
    auto id = ledger_->begin_run(run_);
    if (id) {
      run_.id = *id;
      outcome_.recorded = true;
    } else {
      ledger_failed(id.error());
    }
  }

  if (pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return make_error(std::string("pipe: ") + std::strerror(errno));
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGWINCH, SIGQUIT}) sigaction(s, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  SpawnOptions so;
  so.argv = cfg_.argv;
  so.env["GPUMETER_SOCKET"] = sock.path;
  so.env["GPUMETER_RUN_ID"] = std::to_string(run_.id);
  so.use_pty = cfg_.use_pty;
  if (cfg_.use_pty) {
    window_ = terminal_window(STDOUT_FILENO);
    if (window_) {
      auto w = *window_;
      if (cfg_.live_status && w.first >= 3) w.first = static_cast<unsigned short>(w.first - 1);
      so.window = w;
    }
  }
  start_ns_ = clock_.monotonic_ns();
  meter_.emplace(backend_, cfg_.allocated, cfg_.price.micros_per_gpu_hour, start_ns_);
  auto spawned = runner_.spawn(so);
  if (!spawned) {
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGWINCH, SIGQUIT}) signal(s, SIG_DFL);
    close(g_signal_pipe[0]);
    close(g_signal_pipe[1]);
    run_.status = "failed";
    run_.exit_code = 127;
    run_.end_unix_ms = clock_.unix_ms();
    if (ledger_) (void)ledger_->update_run(run_);
    return spawned.error();
  }
  child_ = *spawned;
  RawTerminal raw;
  if (cfg_.use_pty) {
    raw.enter();
    if (cfg_.live_status && window_) status_.start(window_->first);
  }

  bool child_done = false;
  int wait_status = 0;
  std::int64_t next_tick_ns = start_ns_ + cfg_.sample_interval_ms * 1'000'000;
  std::int64_t drain_deadline_ns = 0;
  bool stdin_open = cfg_.use_pty;
  std::vector<int> outputs;
  for (int fd : {child_.stdout_fd, child_.stderr_fd, child_.pty_fd})
    if (fd >= 0) outputs.push_back(fd);

  while (true) {
    std::int64_t now = clock_.monotonic_ns();
    if (!child_done && now >= next_tick_ns) {
      tick(now);
      next_tick_ns += cfg_.sample_interval_ms * 1'000'000;
      if (next_tick_ns <= now) next_tick_ns = now + cfg_.sample_interval_ms * 1'000'000;
    }
    if (stopping_ && !killed_ && !child_done && now >= kill_deadline_ns_) {
      killed_ = true;
      kill(-child_.pid, SIGKILL);
      record_action("sigkill", "the job did not exit within the grace period: sent SIGKILL", now);
    }
    if (child_done && (outputs.empty() || now >= drain_deadline_ns)) break;

    std::vector<pollfd> fds;
    fds.push_back({g_signal_pipe[0], POLLIN, 0});
    fds.push_back({sock.fd, POLLIN, 0});
    for (int fd : outputs) fds.push_back({fd, POLLIN, 0});
    if (stdin_open && !child_done) fds.push_back({STDIN_FILENO, POLLIN, 0});
    std::int64_t wake = child_done ? drain_deadline_ns : next_tick_ns;
    if (stopping_ && !killed_) wake = std::min(wake, kill_deadline_ns_);
    const int timeout_ms = static_cast<int>(std::clamp<std::int64_t>((wake - now + 999'999) / 1'000'000, 0, 1000));
    const int pr = poll(fds.data(), fds.size(), timeout_ms);
    if (pr < 0 && errno != EINTR) break;
    now = clock_.monotonic_ns();
    for (const auto& p : fds) {
      if (!(p.revents & (POLLIN | POLLHUP | POLLERR))) continue;
      if (p.fd == g_signal_pipe[0]) {
        unsigned char sigs[64];
        const ssize_t n = read(p.fd, sigs, sizeof sigs);
        for (ssize_t i = 0; i < n; ++i) {
          const int s = sigs[i];
          if (s == SIGCHLD) continue;
          if (s == SIGWINCH) {
            if (cfg_.use_pty && child_.pty_fd >= 0) {
              window_ = terminal_window(STDOUT_FILENO);
              if (window_) {
                auto w = *window_;
                if (status_.active() && w.first >= 3) {
                  status_.resize(w.first);
                  w.first = static_cast<unsigned short>(w.first - 1);
                }
                set_pty_window(child_.pty_fd, w.first, w.second);
              }
            }
            continue;
          }
          if (!child_done) kill(-child_.pid, s);  // forward INT / TERM / HUP / QUIT
        }
      } else if (p.fd == sock.fd) {
        char buf[65536];
        while (true) {
          const ssize_t n = recv(sock.fd, buf, sizeof buf, 0);
          if (n < 0) break;
          auto u = parse_progress_message(std::string_view(buf, static_cast<std::size_t>(n)));
          if (u) on_progress(*u, now);
          else ++malformed_;
        }
      } else if (p.fd == STDIN_FILENO) {
        char buf[4096];
        const ssize_t n = read(STDIN_FILENO, buf, sizeof buf);
        if (n <= 0) {
          stdin_open = false;
          // End of gpumeter's input: the job reading its terminal sees end-of-file (^D at a line start).
          if (!raw.active && child_.pty_fd >= 0) write_all(child_.pty_fd, "\x04", 1);
        } else {
          write_all(child_.pty_fd, buf, static_cast<std::size_t>(n));
        }
      } else {
        char probe[65536];
        const int out_fd = p.fd == child_.stderr_fd ? STDERR_FILENO : STDOUT_FILENO;
        const ssize_t n = read(p.fd, probe, sizeof probe);
        if (n <= 0) {
          close(p.fd);
          outputs.erase(std::remove(outputs.begin(), outputs.end(), p.fd), outputs.end());
          if (p.fd == child_.stdout_fd) child_.stdout_fd = -1;
          if (p.fd == child_.stderr_fd) child_.stderr_fd = -1;
          if (p.fd == child_.pty_fd) child_.pty_fd = -1;
          continue;
        }
        write_all(out_fd, probe, static_cast<std::size_t>(n));
        auto& parser = p.fd == child_.stderr_fd ? err_parser_ : out_parser_;
        for (const auto& u : parser.feed(std::string_view(probe, static_cast<std::size_t>(n)))) on_progress(u, now);
      }
    }
    if (!child_done) {
      const pid_t w = waitpid(child_.pid, &wait_status, WNOHANG);
      if (w == child_.pid) {
        child_done = true;
        // Output still in flight is copied; a background grandchild holding the pipe open does not hold us.
        drain_deadline_ns = clock_.monotonic_ns() + 300'000'000;
        end_ns_ = clock_.monotonic_ns();
        tick(end_ns_, false);
      }
    }
  }
  for (int fd : outputs) close(fd);
  if (child_.owns_terminal) restore_terminal_foreground();
  status_.stop();
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGWINCH, SIGQUIT}) signal(s, SIG_DFL);
  close(g_signal_pipe[0]);
  close(g_signal_pipe[1]);

  // Final figures: the bill is the billing rule on the wall time, for every allocated GPU.
  const int job_exit = exit_code_of_wait_status(wait_status);
  run_.exit_code = job_exit;
  run_.end_unix_ms = clock_.unix_ms();
  run_.status = run_.stopped_by ? "stopped" : "finished";
  update_totals(end_ns_);
  const auto n_alloc = static_cast<unsigned>(cfg_.allocated.size());
  run_.cost_micros = billed_cost(cfg_.price, run_.billed_s, n_alloc);
  const auto n_unused = static_cast<unsigned>(n_alloc - std::min<std::size_t>(n_alloc, run_.gpus_used.size()));
  run_.unused_gpu_cost_micros = billed_cost(cfg_.price, run_.billed_s, n_unused);
  if (catalog_ && run_.energy_method != "none") {
    if (auto c = estimate_carbon(run_.energy_j / 3.6e6, *catalog_, run_.provider, run_.region)) {
      run_.co2_kg = c->co2_kg;
      run_.carbon_source = c->intensity_source + (c->pue_source.empty() ? "" : ", PUE " + c->pue_source);
    }
  }
  if (malformed_ > 0) warn(fmt::format("{} malformed progress message(s) ignored", malformed_));
  flush(true);
  for (auto& t : notifiers_) t.join();
  std::vector<ActionRecord> actions = all_actions_;
  std::vector<ProgressRecord> progress;
  if (latest_progress_) progress.push_back(*latest_progress_);
  outcome_.report = build_run_report(run_, meter_->usage(), progress, actions, catalog_);
  outcome_.exit_code = run_.stopped_by ? kExitGuardStop : job_exit;
  return outcome_;
}

}  // namespace

Result<SessionOutcome> run_session(const SessionConfig& config, GpuBackend& backend, Ledger* ledger,
                                   const Catalog* catalog, Clock& clock, ProcessRunner& runner) {
  Supervisor s(config, backend, ledger, catalog, clock, runner);
  return s.run();
}

}  // namespace gm
