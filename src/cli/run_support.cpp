#include "cli/run_support.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "catalog/catalog.h"
#include "cli/common.h"
#include "cli/run_terminal.h"
#include "guard/session.h"
#include "meter/run_meter.h"
#include "report/run_report.h"
#include "store/store.h"
#include "sys/proc.h"
#include "sys/spawn.h"
#include "util/exit_codes.h"
#include "util/units.h"

namespace gm::cli {
namespace {

int usage(const char* command, const std::string& msg) {
  std::fprintf(stderr, "gpumeter %s: error: %s\nRun 'gpumeter %s --help' for usage.\n", command, msg.c_str(),
               command);
  return kExitUsage;
}

int usage(const std::string& msg) {
  return usage("run", msg);
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

}  // namespace

void add_session_flags(CLI::App& app, RunFlags& f) {
  add_pricing_flags(app, f.pricing);
  app.add_option("--budget", f.budget, "budget in USD (e.g. 25 or 0.50): stop the job when spend reaches it");
  app.add_option("--warn-at", f.warn_at, "warn at these percentages of the budget (default 80%)");
  app.add_option("--max-idle", f.max_idle,
                 "stop when every allocated GPU is under 5% utilization this long (e.g. 15m)");
  app.add_option("--grace", f.grace,
                 "time between the stop signal and SIGKILL to the process group (default 60s); 'never': "
                 "the stop signal is the whole action (a notebook kernel survives it)");
  app.add_option("--stop-signal", f.stop_signal, "signal sent to stop the job (default TERM)");
  app.add_option(
      "--stop-to", f.stop_to,
      "who gets the stop signal: main (the job's main process, default; its DataLoader workers live "
      "while it checkpoints) or group (every process of the job)");
  app.add_option("--total-steps", f.total_steps, "total steps, when the job's progress does not say");
  app.add_option("--label", f.labels, "label k=v recorded with the run (repeatable)");
  app.add_option("--json-report", f.json_report, "write the run report as JSON to FILE");
  app.add_option("--ledger", f.ledger,
                 "ledger file (default $GPUMETER_LEDGER or $XDG_DATA_HOME/gpumeter/ledger.db)");
  app.add_option("--notify", f.notify, "command run (sh -c) on every action, with GPUMETER_* variables");
  app.add_option("--webhook", f.webhook,
                 "URL receiving a JSON POST (Slack-compatible \"text\") on every action");
  app.add_flag("--quiet,-q", f.quiet, "no status line, action lines or report from gpumeter on the terminal");
  app.add_option("--status-every", f.status_every,
                 "without a terminal: a one-line summary on stderr this often");
}

void add_run_flags(CLI::App& app, RunFlags& f) {
  add_session_flags(app, f);
  app.add_flag("--forecast-stop", f.forecast_stop, "stop when the forecast's lower bound exceeds the budget");
  app.add_option(
      "--inference-endpoint", f.inference_endpoint,
      "the job is an inference server: read its engine metrics (vLLM, SGLang, TGI, Triton) from this "
      "URL, or 'auto' for the port the job listens on; $ per 1M tokens and per 1k requests");
  app.footer(
      "COMMAND: the job and its arguments. gpumeter's options end at the first word that is not one of them "
      "(as with env, nohup or timeout), or at --: everything after belongs to the job.");
}

std::optional<int> parse_run_args(CLI::App& app, RunFlags& f, int argc, char** argv) {
  // Find where gpumeter's options end: "--", or the first word that is neither an option nor an option's
  // value. CLI11 then parses only that part, so the job's own flags never reach it (issue 19).
  auto takes_value = [&](const std::string& arg) -> std::optional<bool> {
    std::string name = arg;
    if (const auto eq = name.find('='); eq != std::string::npos) return false;  // --grace=5s
    for (const CLI::Option* o : app.get_options())
      if (o->check_name(name)) return o->get_expected_min() > 0;
    return std::nullopt;
  };
  int split = argc;
  bool dashdash = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") {
      split = i;
      dashdash = true;
      break;
    }
    if (a.size() > 1 && a[0] == '-') {
      const auto value = takes_value(a);
      if (!value) {
        std::fprintf(
            stderr,
            "gpumeter run: error: unknown option '%s'. If it belongs to the job, put it after the job's "
            "command (gpumeter run [OPTIONS] COMMAND %s) or after --.\nRun 'gpumeter run --help' for "
            "usage.\n",
            a.c_str(), a.c_str());
        return kExitUsage;
      }
      if (*value) ++i;
      continue;
    }
    split = i;
    break;
  }
  std::vector<char*> own(argv, argv + std::min(split, argc));
  if (auto rc = parse_args(app, static_cast<int>(own.size()), own.data())) return rc;
  for (int i = split + (dashdash ? 1 : 0); i < argc; ++i) f.command.emplace_back(argv[i]);
  return std::nullopt;
}

std::optional<int> prepare_session(const RunFlags& f, const char* command, SessionSetup& out) {
  const bool attach = std::string(command) == "attach";
  SessionConfig& cfg = out.cfg;
  if (f.budget) {
    auto micros = parse_usd_micros(*f.budget);
    if (!micros || *micros <= 0)
      return usage(command, fmt::format("--budget {}: the budget must be a positive number of USD", *f.budget));
    cfg.guard.budget_micros = *micros;
  }
  auto warn = parse_warn_at(f.warn_at);
  if (!warn) return usage(command, warn.error().message);
  cfg.guard.warn_at_pct = *warn;
  cfg.guard.forecast_stop = f.forecast_stop;
  if (f.forecast_stop && !f.budget) return usage(command, "--forecast-stop needs --budget");
  if (f.max_idle) {
    auto ms = parse_duration_ms(*f.max_idle);
    if (!ms || *ms <= 0)
      return usage(command, "--max-idle '" + *f.max_idle + "': expected a duration such as 90s or 15m");
    cfg.guard.max_idle_ms = *ms;
  }
  if (attach) {
    // attach: --max-idle is the threshold of the idle_gpus_held finding, never a stop (docs/cli.md).
    cfg.idle_held_ms = cfg.guard.max_idle_ms.value_or(kDefaultIdleHeldMs);
    cfg.guard.max_idle_ms.reset();
  }
  if (f.grace == "never") {
    cfg.kill_after_grace = false;
  } else {
    auto grace = parse_duration_ms(f.grace);
    if (!grace)
      return usage(command, "--grace '" + f.grace + "': expected a duration such as 30s or 2m, or never");
    cfg.grace_ms = *grace;
  }
  cfg.notify_command = f.notify;
  cfg.webhook_url = f.webhook;
  auto sig = parse_signal(f.stop_signal);
  if (!sig) return usage(command, "--stop-signal: " + sig.error().message);
  cfg.stop_signal = *sig;
  if (f.total_steps && *f.total_steps <= 0) return usage(command, "--total-steps must be a positive integer");
  if (f.status_every) {
    auto ms = parse_duration_ms(*f.status_every);
    if (!ms || *ms <= 0)
      return usage(command, "--status-every '" + *f.status_every + "': expected a duration such as 30s");
    cfg.status_every_ms = *ms;
  }
  if (f.webhook && f.webhook->rfind("http://", 0) != 0 && f.webhook->rfind("https://", 0) != 0)
    return usage(command, "--webhook '" + *f.webhook + "': expected an http:// or https:// URL");
  for (const auto& l : f.labels) {
    const auto eq = l.find('=');
    if (eq == std::string::npos || eq == 0) return usage(command, "--label '" + l + "': expected KEY=VALUE");
    cfg.run.labels[l.substr(0, eq)] = l.substr(eq + 1);
  }

  if (f.stop_to == "main")
    cfg.stop_to = StopTarget::main;
  else if (f.stop_to == "group")
    cfg.stop_to = StopTarget::group;
  else
    return usage(command, "--stop-to '" + f.stop_to + "': expected main or group");

  auto prices = PricingContext::open(f.pricing, std::make_unique<DmiInstanceDetector>());
  if (!prices) return fail(command, prices.error());
  // Without a GPU library (a laptop, a CI runner) the job still runs: wall time × price, or time only.
  auto backend = open_gpu_backend();
  if (!backend && backend.error().kind != ErrorKind::no_gpu_library) return fail(command, backend.error());
  cfg.telemetry = backend.ok();
  std::optional<std::string> gpu_name;
  if (backend) {
    const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
    auto allocated =
        allocated_gpus(cvd ? std::optional<std::string>(cvd) : std::nullopt, (*backend)->devices());
    if (!allocated) return usage(command, allocated.error().message);
    cfg.allocated = *allocated;
    for (const auto& d : (*backend)->devices())
      if (!cfg.allocated.empty() && d.index == cfg.allocated.front()) gpu_name = d.name;
  }
  auto price = prices->price_for(gpu_name);
  if (!price) return fail(command, price.error());
  if (price->quote) {
    cfg.price = *price->quote;
  } else if (cfg.telemetry) {
    return fail(command, make_error(ErrorKind::not_found, price->unpriced_reason));
  }

  cfg.run.user = user_name(static_cast<std::uint32_t>(getuid()));
  cfg.run.host = host_name();
  if (gpu_name) {
    const GpuSpec* spec = prices->gpu_for(*gpu_name, (*backend)->vendor());
    cfg.run.gpu_model = spec ? spec->id : *gpu_name;
  }
  cfg.run.total_steps = f.total_steps;

  if (f.inference_endpoint) {
    auto source = make_engine_inference_source(*f.inference_endpoint, cfg.sample_interval_ms);
    if (!source) return usage(command, source.error().message);
    out.inference = std::move(*source);
    cfg.inference = out.inference.get();
  }

  const std::string ledger_path = f.ledger ? *f.ledger : Ledger::default_path();
  if (auto l = Ledger::open(ledger_path)) {
    out.ledger = std::move(*l);
  } else {
    std::fprintf(stderr,
                 "gpumeter %s: warning: %s\ngpumeter %s: warning: the job is metered, but this run is NOT "
                 "recorded in a ledger (the report is still printed%s)\n",
                 command, l.error().message.c_str(), command,
                 f.json_report ? " and written to --json-report" : "");
  }
  out.prices.emplace(std::move(*prices));
  if (backend) out.backend = std::move(*backend);
  return std::nullopt;
}

int execute_run(const RunFlags& f, bool simulated) {
  if (f.command.empty()) return usage("no command given: gpumeter run [flags] -- COMMAND [ARGS...]");
  SessionSetup setup;
  if (auto rc = prepare_session(f, "run", setup)) return *rc;
  SessionConfig& cfg = setup.cfg;
  cfg.argv = f.command;
  std::string command;
  for (const auto& a : f.command) command += (command.empty() ? "" : " ") + a;
  cfg.run.command = command;
  cfg.use_pty = stdout_is_tty();
  cfg.simulated = simulated;
  TerminalSink sink(cfg.use_pty, !f.quiet, f.quiet, simulated);
  cfg.window = sink.job_window();
  auto& prices = setup.prices;
  auto& backend = setup.backend;
  auto& ledger = setup.ledger;

  PosixProcessRunner runner;
  auto outcome =
      run_session(cfg, backend.get(), ledger.get(), &prices->catalog(), system_clock(), runner, sink);
  sink.stop();
  if (!outcome) {
    std::fprintf(stderr, "gpumeter run: error: %s\n", outcome.error().message.c_str());
    return exit_code_for(outcome.error().kind);
  }
  if (outcome->start_error) {
    std::fprintf(stderr, "gpumeter run: error: %s\n", outcome->start_error->c_str());
    return outcome->exit_code;
  }
  if (!f.quiet) {
    const std::string text = render_run_report_text(outcome->report, simulated);
    std::fputs(text.c_str(), stderr);
  }
  if (f.json_report) {
    std::ofstream out(*f.json_report, std::ios::binary | std::ios::trunc);
    out << render_run_report_json(outcome->report);
    if (!out)
      std::fprintf(stderr, "gpumeter run: warning: cannot write --json-report %s\n", f.json_report->c_str());
  }
  return outcome->exit_code;
}

}  // namespace gm::cli
