// gpumeter attach PID: meters a process gpumeter did not start (a notebook kernel, a training job already
// running) with run's supervisor; --json-lines streams one JSON object per interval for programs (the IPython
// extension) that display it.
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "cli/common.h"
#include "cli/run_publish.h"
#include "cli/run_support.h"
#include "cli/run_terminal.h"
#include "guard/session.h"
#include "report/live_render.h"
#include "report/run_report.h"
#include "sys/proc.h"
#include "sys/spawn.h"
#include "util/file.h"
#include "util/money.h"

namespace gm::cli {
namespace {

/// The --json-lines side of an attached session: one object per line on stdout, flushed at once.
class JsonLinesSink final : public guard::SessionSink {
 public:
  JsonLinesSink(pid_t pid, std::map<unsigned, std::uint64_t> memory_total)
      : pid_(pid), memory_total_(std::move(memory_total)) {}

  void emit(const nlohmann::json& j) {
    const std::string line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    std::fwrite(line.data(), 1, line.size(), stdout);
    std::fflush(stdout);
  }
  void job_output(guard::JobStream, std::string_view) override {}
  void message(const std::string& text, bool warning) override {
    if (warning) emit({{"type", "warning"}, {"message", text}});
  }
  void session_started(std::int64_t run_id, const std::string& socket_path,
                       std::int64_t start_unix_ms) override {
    emit(report::live_started_json(pid_, run_id, socket_path, start_unix_ms));
  }
  void action(const store::ActionRecord& a) override { emit(report::live_action_json(a)); }
  void cell(const store::CellRecord& c) override { emit(report::live_cell_json(c)); }
  void status(const guard::StatusSnapshot& s, bool) override {
    emit(report::live_status_json(s, memory_total_));
  }

 private:
  pid_t pid_;
  std::map<unsigned, std::uint64_t> memory_total_;
};

int usage(const std::string& msg) {
  std::fprintf(stderr, "gpumeter attach: error: %s\nRun 'gpumeter attach --help' for usage.\n", msg.c_str());
  return util::kExitUsage;
}

}  // namespace

int cmd_attach(int argc, char** argv) {
  CLI::App app{"Meter a running process that gpumeter did not start (and its descendants)", "attach"};
  RunFlags f;
  f.stop_signal = "INT";
  add_session_flags(app, f);
  app.add_option("PID", f.pid, "the process to meter")->required();
  app.add_flag("--json-lines", f.json_lines,
               "one JSON object per interval on stdout (spent, $/h, GPUs, utilization, forecast), plus "
               "started / action / cell / end events");
  app.add_option("--from", f.from,
                 "count the session from 'now' (default) or from the process's 'start' (a notebook kernel)");
  app.footer(
      "attach ends when the process ends, or on SIGINT / SIGTERM to gpumeter (it detaches and records what "
      "it "
      "metered). Its stop action sends --stop-signal (default INT) to the process; --grace never: nothing "
      "after it. --max-idle (default 30m) is the threshold of the idle_gpus_held finding, no action. Exit "
      "codes: 0 the process ended or gpumeter detached, 86 gpumeter stopped it, 4 no such process, 2 usage.");
  // The shared flags read differently here (docs/cli.md).
  app.get_option("--stop-signal")->description("signal sent to stop the process (default INT)");
  app.get_option("--max-idle")
      ->description(
          "threshold of the idle_gpus_held finding (default 30m): GPUs under 5% utilization this long "
          "while the process holds memory on them; no action");
  app.get_option("--grace")->description(
      "time between the stop signal and SIGKILL to the process tree (default 60s); 'never': the stop signal "
      "is the whole action (a notebook kernel survives it)");
  if (auto rc = parse_args(app, argc, argv)) return *rc;
  if (f.from != "now" && f.from != "start") return usage("--from '" + f.from + "': expected now or start");
  if (f.forecast_stop) return usage("--forecast-stop is a run flag");
  const pid_t pid = static_cast<pid_t>(*f.pid);
  if (*f.pid <= 0 || *f.pid > 4'194'304) return usage(fmt::format("PID {}: expected a process id", *f.pid));
  auto runner = sys::WatchedProcessRunner::watch(pid);
  if (!runner) return fail("attach", runner.error());

  SessionSetup setup;
  if (auto rc = prepare_session(f, "attach", setup)) return *rc;
  guard::SessionConfig& cfg = setup.cfg;
  cfg.attached = true;
  cfg.control_datagrams = true;
  sys::ProcReader proc;
  if (f.from == "start") {
    auto age = proc.age_ms(static_cast<std::uint32_t>(pid));
    if (!age) return fail("attach", make_error(ErrorKind::not_found, fmt::format("no process {}", pid)));
    cfg.started_ago_ms = *age;
  }
  std::string command = fmt::format("attach {}", pid);
  if (auto cmdline = util::read_small_file(fmt::format("/proc/{}/cmdline", pid));
      cmdline && !cmdline->empty()) {
    std::string joined;
    for (char c : *cmdline) joined += c == '\0' ? ' ' : c;
    while (!joined.empty() && joined.back() == ' ') joined.pop_back();
    command = joined;
  }
  cfg.run.command = command;
  if (!cfg.run.labels.count("attached_pid")) cfg.run.labels["attached_pid"] = std::to_string(pid);

  std::map<unsigned, std::uint64_t> memory_total;
  if (setup.backend)
    for (const auto& d : setup.backend->devices())
      if (d.memory_total_bytes) memory_total[d.index] = *d.memory_total_bytes;
  JsonLinesSink json_sink(pid, memory_total);
  const bool live = !f.json_lines && !f.quiet && stdout_is_tty();
  TerminalSink terminal_sink(false, live, f.quiet, false);
  PublishedSession published(f.json_lines ? static_cast<guard::SessionSink&>(json_sink) : terminal_sink,
                             command);

  auto outcome =
      guard::attach_session(cfg, pid, setup.backend.get(), setup.ledger.get(), &setup.prices->catalog(),
                            util::system_clock(), **runner, published.sink());
  terminal_sink.stop();
  setup.finish_ledger("attach");
  if (!outcome) {
    std::fprintf(stderr, "gpumeter attach: error: %s\n", outcome.error().message.c_str());
    return util::exit_code_for(outcome.error().kind);
  }
  const report::RunReport report = report::session_report(*outcome, &setup.prices->catalog());
  if (f.json_lines) {
    json_sink.emit(
        {{"type", "end"},
         {"run_id", report.run.id},
         {"recorded", outcome->recorded},
         {"status", util::text_of(report.run.status)},
         {"stopped_by", report.run.stopped_by ? nlohmann::json(*report.run.stopped_by) : nlohmann::json()},
         {"wall_s", report.wall_s},
         {"cost_usd", util::micros_to_usd(report.run.cost_micros)},
         {"idle_cost_usd", report.idle_cost_usd},
         {"findings", findings::to_json(report.findings)}});
  } else if (!f.quiet) {
    std::fputs(report::render_run_report_text(report, false).c_str(), stderr);
  }
  if (f.json_report) {
    std::ofstream out(*f.json_report, std::ios::binary | std::ios::trunc);
    out << report::render_run_report_json(report);
    if (!out)
      std::fprintf(stderr, "gpumeter attach: warning: cannot write --json-report %s\n",
                   f.json_report->c_str());
  }
  return outcome->exit_code;
}

}  // namespace gm::cli
