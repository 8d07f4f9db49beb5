#include "cli/run_terminal.h"

#include <fmt/format.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "util/units.h"

namespace gm::cli {
namespace {

/// Display width of UTF-8 text (code points; the status line uses no wide characters).
std::size_t columns(std::string_view s) {
  std::size_t n = 0;
  for (unsigned char c : s) n += (c & 0xc0) != 0x80;
  return n;
}

std::string cut_to_columns(const std::string& s, std::size_t width) {
  std::size_t cols = 0, i = 0;
  for (; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if ((c & 0xc0) != 0x80) {
      if (cols == width) break;
      ++cols;
    }
  }
  return s.substr(0, i);
}

}  // namespace

std::string render_target_field(const TargetStatus& t) {
  const TargetForecast& f = t.forecast;
  std::string s = fmt::format("{} {} → {:g}", t.target.metric,
                              f.current_value ? fmt::format("{:.4g}", *f.current_value) : std::string("?"),
                              t.target.threshold);
  auto interval = [&] {
    if (!f.cost_to_reach_usd) return std::string();
    return fmt::format(", {} in all [{}–{}]", format_usd(*f.cost_to_reach_usd),
                       format_usd(f.low_usd.value_or(*f.cost_to_reach_usd)),
                       f.high_usd ? format_usd(*f.high_usd) : std::string("not reached"));
  };
  switch (f.verdict) {
    case TargetVerdict::too_early:
      return s + ": too early to tell";
    case TargetVerdict::reached:
      return s + fmt::format(": reached at step {:.0f}", f.reached_at_step.value_or(0)) +
             (f.cost_to_reach_usd ? ", " + format_usd(*f.cost_to_reach_usd) : std::string());
    case TargetVerdict::on_track:
      return s + fmt::format(" at ~step {:.0f}", f.reached_at_step.value_or(0)) + interval();
    case TargetVerdict::unreachable_within_steps:
      return s + ": not within the planned steps";
    case TargetVerdict::unreachable_within_budget:
      return s + fmt::format(": not before the budget (~step {:.0f}", f.reached_at_step.value_or(0)) +
             interval() + ")";
  }
  return s;
}

std::string render_status_line(const StatusSnapshot& s, std::size_t width) {
  struct Field {
    int drop_order;  // higher goes first
    std::string text;
  };
  std::vector<Field> f;
  f.push_back(
      {0, fmt::format("{}gpumeter {}", s.simulated ? "SIMULATED · " : "", format_duration_s(s.elapsed_s))});
  if (s.spent_micros)
    f.push_back({0, " · " + format_micros(*s.spent_micros)});
  else
    f.push_back({0, " · no price"});
  if (s.burn_usd_per_h) f.push_back({5, fmt::format(" · {}/h", format_usd(*s.burn_usd_per_h))});
  if (s.step)
    f.push_back(
        {4, fmt::format(" · step {}{}", *s.step, s.total_steps ? fmt::format("/{}", *s.total_steps) : "")});
  if (s.progress_note) f.push_back({4, fmt::format(" ({})", *s.progress_note)});
  if (s.forecast) {
    f.push_back({2, fmt::format(" · forecast {}", format_usd(s.forecast->total_usd))});
    f.push_back(
        {6, fmt::format(" [{}–{}]", format_usd(s.forecast->low_usd), format_usd(s.forecast->high_usd))});
    f.push_back({1, fmt::format(" · ETA {}", format_duration_s(s.forecast->remaining_s))});
  }
  if (s.target) f.push_back({3, " · " + render_target_field(*s.target)});
  if (s.budget_left_micros)
    f.push_back({1, fmt::format(" · budget left {}", format_micros(*s.budget_left_micros))});
  if (!s.telemetry) f.push_back({3, " · no GPU telemetry"});
  if (s.usd_per_1m_generated_tokens)
    f.push_back({2, fmt::format(" · {}/1M tok", format_usd(*s.usd_per_1m_generated_tokens))});
  if (s.usd_per_1k_requests)
    f.push_back({3, fmt::format(" · {}/1k req", format_usd(*s.usd_per_1k_requests))});
  if (s.generated_tokens_per_s) f.push_back({6, fmt::format(" · {:.0f} tok/s", *s.generated_tokens_per_s)});
  if (s.mfu) f.push_back({3, fmt::format(" · MFU {:.0f}%", *s.mfu * 100.0)});
  int gpu_order = 7;
  for (const auto& d : s.gpus) {
    std::string g = fmt::format(" · GPU{} ", d.index);
    g += d.utilization_pct ? fmt::format("{}%", *d.utilization_pct) : "n/a";
    // GPM's tensor-core activity tells a bf16 matrix product (86 %) from an fp32 one (0 %) at the same util.
    if (d.gpm.tensor_active_pct) g += fmt::format(" tensor {:.0f}%", *d.gpm.tensor_active_pct);
    f.push_back({gpu_order, g});
    std::string detail;
    if (d.memory_used_bytes) detail += " " + format_bytes(*d.memory_used_bytes);
    if (d.power_mw) detail += fmt::format(" {:.0f}W", *d.power_mw / 1000.0);
    if (!detail.empty()) f.push_back({gpu_order + 1, detail});
    gpu_order += 2;
  }
  if (s.stopping) f.push_back({0, " · STOPPING"});
  auto join = [&] {
    std::string out;
    for (const auto& x : f) out += x.text;
    return out;
  };
  std::string line = join();
  while (columns(line) > width) {
    auto worst = f.end();
    for (auto it = f.begin(); it != f.end(); ++it)
      if (it->drop_order > 0 && (worst == f.end() || it->drop_order >= worst->drop_order)) worst = it;
    if (worst == f.end()) return cut_to_columns(line, width);
    f.erase(worst);
    line = join();
  }
  return line;
}

struct TerminalSink::TermiosState {
  termios saved{};
};

TerminalSink::TerminalSink(bool pty, bool live_status, bool quiet, bool simulated)
    : pty_(pty), live_status_(live_status && pty && !quiet), quiet_(quiet), simulated_(simulated) {
  if (pty_) window_ = terminal_window(STDOUT_FILENO);
}

TerminalSink::~TerminalSink() {
  stop();
}

std::optional<std::pair<unsigned short, unsigned short>> TerminalSink::job_window() const {
  if (!window_) return std::nullopt;
  auto w = *window_;
  if (live_status_ && w.first >= 3) w.first = static_cast<unsigned short>(w.first - 1);
  return w;
}

void TerminalSink::job_started() {
  if (!pty_) return;
  termios t{};
  if (isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &t) == 0) {
    saved_ = std::make_unique<TermiosState>();
    saved_->saved = t;
    termios raw = t;
    cfmakeraw(&raw);
    raw_ = tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
  }
  if (live_status_ && window_ && window_->first >= 3) {
    // A scroll region above the last row keeps the job's output off the status line.
    write_all(STDOUT_FILENO, fmt::format("\n\0337\033[1;{}r\0338\033[1A", window_->first - 1));
    status_active_ = true;
  }
}

void TerminalSink::stop() {
  if (status_active_ && window_) {
    write_all(STDOUT_FILENO,
              fmt::format("\0337\033[1;{}r\033[{};1H\033[2K\0338", window_->first, window_->first));
    status_active_ = false;
  }
  if (raw_ && saved_) tcsetattr(STDIN_FILENO, TCSANOW, &saved_->saved);
  raw_ = false;
}

void TerminalSink::job_output(JobStream stream, std::string_view bytes) {
  if (bytes.empty()) return;
  const int fd = stream == JobStream::err ? STDERR_FILENO : STDOUT_FILENO;
  write_all(fd, bytes);
  const bool at_start = bytes.back() == '\n';
  // On a pty both streams share the terminal; in pipes mode each has its own line state.
  if (pty_ || stream == JobStream::out) at_line_start_out_ = at_start;
  if (pty_ || stream == JobStream::err) at_line_start_err_ = at_start;
}

void TerminalSink::write_line(int fd, const std::string& text) {
  const char* eol = pty_ ? "\r\n" : "\n";
  // A line of gpumeter's starts on a line of its own, never glued to a progress bar redrawn with '\r'.
  std::string out = at_line_start_err_ ? "" : eol;
  out += text + eol;
  write_all(fd, out);
  at_line_start_err_ = true;
  if (pty_) at_line_start_out_ = true;
}

void TerminalSink::message(const std::string& text, bool warning) {
  if (warning) return write_line(STDERR_FILENO, "gpumeter: warning: " + text);
  if (quiet_) return;
  write_line(STDERR_FILENO, std::string(simulated_ ? "SIMULATED " : "") + "gpumeter: " + text);
}

void TerminalSink::status(const StatusSnapshot& snapshot, bool periodic) {
  if (status_active_ && window_) {
    const std::string text = render_status_line(snapshot, window_->second);
    write_all(STDOUT_FILENO,
              fmt::format("\0337\033[{};1H\033[2K\033[7m{}\033[0m\0338", window_->first, text));
  }
  if (periodic) write_line(STDERR_FILENO, render_status_line(snapshot, 1000));  // asked for explicitly
}

std::optional<std::pair<unsigned short, unsigned short>> TerminalSink::resized() {
  if (!pty_) return std::nullopt;
  window_ = terminal_window(STDOUT_FILENO);
  if (!window_) return std::nullopt;
  if (status_active_ && window_->first >= 3)
    write_all(STDOUT_FILENO, fmt::format("\0337\033[1;{}r\0338", window_->first - 1));
  return job_window();
}

}  // namespace gm::cli
