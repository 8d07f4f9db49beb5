#include "cli/run_terminal.h"

#include <fmt/format.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "report/live_render.h"

namespace gm::cli {
struct TerminalSink::TermiosState {
  termios saved{};
};

TerminalSink::TerminalSink(bool pty, bool live_status, bool quiet, bool simulated)
    : pty_(pty), live_status_(live_status && pty && !quiet), quiet_(quiet), simulated_(simulated) {
  if (pty_) window_ = sys::terminal_window(STDOUT_FILENO);
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
    sys::write_all(STDOUT_FILENO, fmt::format("\n\0337\033[1;{}r\0338\033[1A", window_->first - 1));
    status_active_ = true;
  }
}

void TerminalSink::stop() {
  if (status_active_ && window_) {
    sys::write_all(STDOUT_FILENO,
                   fmt::format("\0337\033[1;{}r\033[{};1H\033[2K\0338", window_->first, window_->first));
    status_active_ = false;
  }
  if (raw_ && saved_) tcsetattr(STDIN_FILENO, TCSANOW, &saved_->saved);
  raw_ = false;
}

void TerminalSink::job_output(guard::JobStream stream, std::string_view bytes) {
  if (bytes.empty()) return;
  const int fd = stream == guard::JobStream::err ? STDERR_FILENO : STDOUT_FILENO;
  sys::write_all(fd, bytes);
  const bool at_start = bytes.back() == '\n';
  // On a pty both streams share the terminal; in pipes mode each has its own line state.
  if (pty_ || stream == guard::JobStream::out) at_line_start_out_ = at_start;
  if (pty_ || stream == guard::JobStream::err) at_line_start_err_ = at_start;
}

void TerminalSink::write_line(int fd, const std::string& text) {
  const char* eol = pty_ ? "\r\n" : "\n";
  // A line of gpumeter's starts on a line of its own, never glued to a progress bar redrawn with '\r'.
  std::string out = at_line_start_err_ ? "" : eol;
  out += text + eol;
  sys::write_all(fd, out);
  at_line_start_err_ = true;
  if (pty_) at_line_start_out_ = true;
}

void TerminalSink::message(const std::string& text, bool warning) {
  if (warning) return write_line(STDERR_FILENO, "gpumeter: warning: " + text);
  if (quiet_) return;
  write_line(STDERR_FILENO, std::string(simulated_ ? "SIMULATED " : "") + "gpumeter: " + text);
}

void TerminalSink::status(const guard::StatusSnapshot& snapshot, bool periodic) {
  if (status_active_ && window_) {
    const std::string text = report::render_status_line(snapshot, window_->second);
    sys::write_all(STDOUT_FILENO,
                   fmt::format("\0337\033[{};1H\033[2K\033[7m{}\033[0m\0338", window_->first, text));
  }
  if (periodic)
    write_line(STDERR_FILENO, report::render_status_line(snapshot, 1000));  // asked for explicitly
}

std::optional<std::pair<unsigned short, unsigned short>> TerminalSink::resized() {
  if (!pty_) return std::nullopt;
  window_ = sys::terminal_window(STDOUT_FILENO);
  if (!window_) return std::nullopt;
  if (status_active_ && window_->first >= 3)
    sys::write_all(STDOUT_FILENO, fmt::format("\0337\033[1;{}r\0338", window_->first - 1));
  return job_window();
}

}  // namespace gm::cli
