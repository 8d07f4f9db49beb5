#pragma once
// How `gpumeter run` shows itself: the job's output passed through, gpumeter's action and warning lines
// on new lines of their own, a reserved status line at the bottom of a terminal (as apt does), and
// --status-every summaries without one.
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "guard/session.h"

namespace gm::cli {

/// The terminal (or pipes) side of a run.
class TerminalSink final : public guard::SessionSink {
 public:
  /// `pty`: the job has a pty on gpumeter's terminal; `live_status`: reserve the bottom line;
  /// `quiet`: no status line and no action lines (warnings and asked-for --status-every lines still show).
  TerminalSink(bool pty, bool live_status, bool quiet, bool simulated);
  ~TerminalSink() override;
  /// The window to give the job's pty (the terminal less the status line), if stdout is a terminal.
  std::optional<std::pair<unsigned short, unsigned short>> job_window() const;
  /// Clears the status line and restores the terminal.
  void stop();

  /// Enters raw mode (pty) and reserves the status line.
  void job_started() override;
  void job_output(guard::JobStream stream, std::string_view bytes) override;
  void message(const std::string& text, bool warning) override;
  void status(const guard::StatusSnapshot& snapshot, bool periodic) override;
  std::optional<std::pair<unsigned short, unsigned short>> resized() override;

 private:
  void write_line(int fd, const std::string& text);

  bool pty_, live_status_, quiet_;
  bool simulated_ = false;
  std::optional<std::pair<unsigned short, unsigned short>> window_;
  bool status_active_ = false;
  bool raw_ = false;
  struct TermiosState;
  std::unique_ptr<TermiosState> saved_;
  bool at_line_start_out_ = true, at_line_start_err_ = true;
};

}  // namespace gm::cli
