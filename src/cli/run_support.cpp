#include "cli/run_support.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "catalog/catalog.h"
#include "cli/common.h"
#include "cli/run_publish.h"
#include "cli/run_terminal.h"
#include "guard/session.h"
#include "guard/team_budget.h"
#include "meter/run_meter.h"
#include "plan/plan.h"
#include "report/multi.h"
#include "report/run_report.h"
#include "store/store.h"
#include "sys/pid_namespace.h"
#include "sys/proc.h"
#include "sys/spawn.h"
#include "util/exit_codes.h"
#include "util/units.h"

namespace gm::cli {
namespace {

int usage(const char* command, const std::string& msg) {
  std::fprintf(stderr, "gpumeter %s: error: %s\nRun 'gpumeter %s --help' for usage.\n", command, msg.c_str(),
               command);
  return util::kExitUsage;
}

int usage(const std::string& msg) {
  return usage("run", msg);
}

/// The time one checkpoint takes, assumed for the Young/Daly interval of a run's spot capacity.
constexpr double kAssumedCheckpointS = 60.0;

std::optional<std::string> env_value(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::optional<std::string>(v) : std::nullopt;
}

/// How `run` and `attach` tell the job's GPUs: this process's PID namespace, the device folder
/// ($GPUMETER_DEV_ROOT, else /dev) and the container runtime's allocation.
guard::GpuMatchConfig gpu_match_config() {
  guard::GpuMatchConfig c;
  c.dev_root = sys::gpu_device_root(env_value("GPUMETER_DEV_ROOT"));
  c.pid_namespace = sys::detect_pid_namespace();
  c.nvidia_visible_devices = env_value("NVIDIA_VISIBLE_DEVICES");
  c.cuda_visible_devices = env_value("CUDA_VISIBLE_DEVICES");
  c.self_pid = static_cast<std::uint32_t>(::getpid());
  return c;
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
  app.add_option(
      "--target", f.target,
      "a metric target (METRIC<=V or METRIC>=V, e.g. loss<=2.2, acc>=0.9): forecast when and at what "
      "cost the run reaches it");
  app.add_flag(
      "--target-stop", f.target_stop,
      "stop gracefully when the --target is forecast unreachable within the planned steps or the budget");
  add_mfu_flags(app, f);
}

void add_run_flags(CLI::App& app, RunFlags& f) {
  add_session_flags(app, f);
  app.add_flag("--forecast-stop", f.forecast_stop, "stop when the forecast's lower bound exceeds the budget");
  app.add_option(
      "--inference-endpoint", f.inference_endpoint,
      "the job is an inference server: read its engine metrics (vLLM, SGLang, TGI, Triton) from this "
      "URL, or 'auto' for the port the job listens on; $ per 1M tokens and per 1k requests");
  app.add_option("--preemption", f.preemption,
                 "watch the cloud's preemption notices: auto (default: on the cloud this machine is detected "
                 "on), aws, gcp, azure or off; on a notice the job gets the stop signal at once");
  app.add_option("--metadata-url", f.metadata_url,
                 "base URL of the instance metadata service (default $GPUMETER_METADATA_URL, else "
                 "http://169.254.169.254)");
  app.add_option("--preemption-poll", f.preemption_poll,
                 "interval between polls of the metadata service (default 5s, at most 5s)");
  app.add_option("--checkpoint-glob", f.checkpoint_glob,
                 "files (relative to the job's working directory) whose new modification time marks a "
                 "checkpoint, e.g. 'ckpt/*.pt'");
  app.footer(
      "COMMAND: the job and its arguments. gpumeter's options end at the first word that is not one of them "
      "(as with env, nohup or timeout), or at --: everything after belongs to the job.");
}

std::optional<int> parse_run_args(CLI::App& app, RunFlags& f, int argc, char** argv) {
  // Find where gpumeter's options end: "--", or the first word that is neither an option nor an option's
  // value. CLI11 then parses only that part, so the job's own flags never reach it (issue 19).
  auto takes_value = [&](const std::string& arg) -> std::optional<bool> {
    if (arg.find('=') != std::string::npos) return false;  // --grace=5s
    for (const CLI::Option* o : app.get_options())
      if (o->check_name(arg)) return o->get_expected_min() > 0;
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
        return util::kExitUsage;
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

/// Applies --preemption, --metadata-url ($GPUMETER_METADATA_URL), --preemption-poll and --checkpoint-glob
/// to `cfg`: starts the metadata watcher into `watcher` when notices are watched (auto: on the cloud the
/// instance detector finds, off elsewhere, no network call made to decide). `spot_provider`: the provider of
/// a spot price quote, if any. Returns an exit code on a usage error (message printed).
std::optional<int> setup_preemption(const RunFlags& f, const std::optional<std::string>& spot_provider,
                                    guard::SessionConfig& cfg, std::unique_ptr<cloud::NoticeWatcher>& watcher,
                                    const char* command) {
  auto bad = [&](const std::string& msg) {
    std::fprintf(stderr, "gpumeter %s: error: %s\nRun 'gpumeter %s --help' for usage.\n", command,
                 msg.c_str(), command);
    return util::kExitUsage;
  };
  auto mode = cloud::parse_preemption_mode(f.preemption);
  if (!mode) return bad(mode.error().message);
  const char* env = std::getenv("GPUMETER_METADATA_URL");
  auto base = cloud::metadata_base_url(f.metadata_url, env ? std::optional<std::string>(env) : std::nullopt);
  if (!base) return bad(base.error().message);
  auto poll_ms = util::parse_duration_ms(f.preemption_poll);
  if (!poll_ms || *poll_ms < 10 || *poll_ms > cloud::kDefaultPreemptionPollMs)
    return bad("--preemption-poll '" + f.preemption_poll + "': expected a duration from 10ms to 5s");
  if (f.checkpoint_glob) {
    if (f.checkpoint_glob->empty()) return bad("--checkpoint-glob: empty pattern");
    cfg.checkpoint_glob = f.checkpoint_glob;
    std::error_code ec;
    cfg.checkpoint_dir = std::filesystem::current_path(ec).string();
    if (ec) cfg.checkpoint_dir = ".";
    if (f.pid) {  // attach: the watched process's own working directory
      const auto cwd = std::filesystem::read_symlink("/proc/" + std::to_string(*f.pid) + "/cwd", ec);
      if (!ec) cfg.checkpoint_dir = cwd.string();
    }
  }
  std::optional<cloud::CloudProvider> provider = mode->provider;
  if (!mode->off && !provider) provider = cloud::detect_cloud_provider();
  if (mode->off) provider.reset();
  if (provider) {
    watcher = std::make_unique<cloud::NoticeWatcher>(
        *provider, cloud::make_http_metadata_client(*base, std::min(cloud::kMetadataTimeoutMs, *poll_ms * 2)),
        *poll_ms, [] { return util::system_clock().unix_ms(); });
    cfg.notices = watcher.get();
  }
  // A job on spot capacity (a spot price, or notices watched) should checkpoint at least every Young/Daly
  // interval of its provider's interruption rate (plan's spot model, a 60 s checkpoint assumed).
  std::optional<std::string> spot = spot_provider;
  if (!spot && provider) spot = std::string(cloud::provider_name(*provider));
  if (spot) {
    const double per_hour = plan::default_interruption_rate(*spot).value;
    if (per_hour > 0) {
      const double interval_s = plan::daly_interval_s(kAssumedCheckpointS, 3600.0 / per_hour);
      cfg.checkpoint_interval_ms = static_cast<std::int64_t>(interval_s * 1000.0);
    }
  }
  return std::nullopt;
}

std::optional<int> prepare_session(const RunFlags& f, const char* command, SessionSetup& out) {
  const bool attach = std::string(command) == "attach";
  guard::SessionConfig& cfg = out.cfg;
  if (f.budget) {
    auto micros = util::parse_usd_micros(*f.budget);
    if (!micros || *micros <= 0)
      return usage(command,
                   fmt::format("--budget {}: the budget must be a positive number of USD", *f.budget));
    cfg.guard.budget_micros = *micros;
  }
  auto warn = guard::parse_warn_at(f.warn_at);
  if (!warn) return usage(command, warn.error().message);
  cfg.guard.warn_at_pct = *warn;
  cfg.guard.forecast_stop = f.forecast_stop;
  if (f.forecast_stop && !f.budget) return usage(command, "--forecast-stop needs --budget");
  if (f.target_stop && !f.target) return usage(command, "--target-stop needs --target");
  if (f.target) {
    auto t = meter::parse_metric_target(*f.target);
    if (!t) return usage(command, t.error().message);
    cfg.target = guard::TargetSettings{*t, f.target_stop};
  }
  if (f.max_idle) {
    auto ms = util::parse_duration_ms(*f.max_idle);
    if (!ms || *ms <= 0)
      return usage(command, "--max-idle '" + *f.max_idle + "': expected a duration such as 90s or 15m");
    cfg.guard.max_idle_ms = *ms;
  }
  if (attach) {
    // attach: --max-idle is the threshold of the idle_gpus_held finding, never a stop (docs/cli.md).
    cfg.idle_held_ms = cfg.guard.max_idle_ms.value_or(guard::kDefaultIdleHeldMs);
    cfg.guard.max_idle_ms.reset();
  }
  if (f.grace == "never") {
    cfg.kill_after_grace = false;
  } else {
    auto grace = util::parse_duration_ms(f.grace);
    if (!grace)
      return usage(command, "--grace '" + f.grace + "': expected a duration such as 30s or 2m, or never");
    cfg.grace_ms = *grace;
  }
  cfg.notify_command = f.notify;
  cfg.webhook_url = f.webhook;
  auto sig = sys::parse_signal(f.stop_signal);
  if (!sig) return usage(command, "--stop-signal: " + sig.error().message);
  cfg.stop_signal = *sig;
  if (f.total_steps && *f.total_steps <= 0) return usage(command, "--total-steps must be a positive integer");
  if (f.status_every) {
    auto ms = util::parse_duration_ms(*f.status_every);
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
    cfg.stop_to = guard::StopTarget::main;
  else if (f.stop_to == "group")
    cfg.stop_to = guard::StopTarget::group;
  else
    return usage(command, "--stop-to '" + f.stop_to + "': expected main or group");

  auto prices = meter::PricingContext::open(f.pricing, std::make_unique<meter::DmiInstanceDetector>());
  if (!prices) return fail(command, prices.error());
  // Without a GPU library (a laptop, a CI runner) the job still runs: wall time × price, or time only.
  auto backend = gpu::open_gpu_backend();
  if (!backend && backend.error().kind != ErrorKind::no_gpu_library) return fail(command, backend.error());
  cfg.telemetry = backend.ok();
  std::optional<std::string> gpu_name;
  if (backend) {
    const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
    auto allocated =
        meter::allocated_gpus(cvd ? std::optional<std::string>(cvd) : std::nullopt, (*backend)->devices());
    if (!allocated) return usage(command, allocated.error().message);
    cfg.allocated = *allocated;
    cfg.gpu_match = gpu_match_config();
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

  cfg.run.user = sys::user_name(static_cast<std::uint32_t>(getuid()));
  cfg.run.host = host_name();
  if (gpu_name) {
    const catalog::GpuSpec* spec = prices->gpu_for(*gpu_name, (*backend)->vendor());
    cfg.run.gpu_model = spec ? spec->id : *gpu_name;
  }
  {
    const catalog::GpuSpec* spec = gpu_name ? prices->gpu_for(*gpu_name, (*backend)->vendor()) : nullptr;
    if (auto rc = apply_mfu_flags(f, spec, command, cfg)) return rc;
  }
  cfg.run.total_steps = f.total_steps;

  if (auto rc = setup_preemption(
          f, cfg.price && cfg.price->spot ? std::optional(cfg.price->provider) : std::nullopt, cfg,
          out.notices, command))
    return rc;

  if (f.inference_endpoint) {
    auto source = serving::make_engine_inference_source(*f.inference_endpoint, cfg.sample_interval_ms);
    if (!source) return usage(command, source.error().message);
    out.inference = std::move(*source);
    cfg.inference = out.inference.get();
  }

  if (auto it = cfg.run.labels.find("host"); it != cfg.run.labels.end()) {
    cfg.run.host = it->second;  // --label host=NAME names the machine in the ledger
    cfg.run.labels.erase(it);
  }
  auto location = store::ledger_location(f.ledger);
  if (!location) return fail(command, location.error());
  if (store::is_postgres_location(*location)) {
    // A shared ledger never fails the job: unreachable, the run is spooled here and replayed later.
    auto spooling = std::make_unique<store::SpoolingLedger>(*location, store::default_spool_dir());
    out.shared = spooling.get();
    print_ledger_notes(command, spooling->take_notes());
    out.ledger = std::move(spooling);
  } else if (auto l = store::Ledger::open(*location)) {
    out.ledger = std::move(*l);
  } else {
    std::fprintf(stderr,
                 "gpumeter %s: warning: %s\ngpumeter %s: warning: the job is metered, but this run is NOT "
                 "recorded in a ledger (the report is still printed%s)\n",
                 command, l.error().message.c_str(), command,
                 f.json_report ? " and written to --json-report" : "");
  }
  if (out.ledger) {
    // Team budgets: a spent one refuses the run; the others guard it while it runs.
    auto teams = guard::team_budgets_matching(*out.ledger, cfg.run, util::system_clock().unix_ms());
    if (!teams) {
      if (teams.error().kind != ErrorKind::unavailable) return fail(command, teams.error());
      std::fprintf(
          stderr,
          "gpumeter %s: warning: team budgets cannot be checked (%s): this run is guarded by %s only\n",
          command, teams.error().message.c_str(),
          cfg.guard.budget_micros ? "its own --budget" : "nothing (no --budget)");
    } else {
      for (const auto& t : *teams) {
        if (t.spent_micros >= t.budget.limit_micros) {
          std::fprintf(
              stderr,
              "gpumeter %s: error: the team budget %s (%s per %s) is spent: %s by %lld run(s) since %s "
              "UTC; the job was not started (raise it with gpumeter budget set)\n",
              command, t.budget.selector.c_str(),
              util::format_usd(util::micros_to_usd(t.budget.limit_micros)).c_str(),
              util::text_of(t.budget.period), util::format_usd(util::micros_to_usd(t.spent_micros)).c_str(),
              static_cast<long long>(t.runs), report::format_time_utc(t.budget.period_start_unix_ms).c_str());
          return util::kExitTeamBudgetSpent;
        }
        cfg.guard.team_budgets.push_back(t.budget);
      }
    }
  }
  out.prices.emplace(std::move(*prices));
  if (backend) out.backend = std::move(*backend);
  return std::nullopt;
}

void SessionSetup::finish_ledger(const char* command) {
  if (!shared) return;
  shared->finish();
  print_ledger_notes(command, shared->take_notes());
}

int execute_run(const RunFlags& f, bool simulated) {
  if (f.command.empty()) return usage("no command given: gpumeter run [flags] -- COMMAND [ARGS...]");
  SessionSetup setup;
  if (auto rc = prepare_session(f, "run", setup)) return *rc;
  guard::SessionConfig& cfg = setup.cfg;
  cfg.argv = f.command;
  std::string command;
  for (const auto& a : f.command) command += (command.empty() ? "" : " ") + a;
  cfg.run.command = command;
  cfg.use_pty = stdout_is_tty();
  cfg.simulated = simulated;
  cfg.control_datagrams = true;  // stop and budget requests (gpumeter mcp, the node agent) on its socket
  TerminalSink sink(cfg.use_pty, !f.quiet, f.quiet, simulated);
  cfg.window = sink.job_window();
  auto& prices = setup.prices;
  auto& backend = setup.backend;
  auto& ledger = setup.ledger;

  sys::PosixProcessRunner runner;
  PublishedSession published(sink, command);
  auto outcome = guard::run_session(cfg, backend.get(), ledger.get(), &prices->catalog(),
                                    util::system_clock(), runner, published.sink());
  sink.stop();
  setup.finish_ledger("run");
  if (!outcome) {
    std::fprintf(stderr, "gpumeter run: error: %s\n", outcome.error().message.c_str());
    return util::exit_code_for(outcome.error().kind);
  }
  if (outcome->start_error) {
    std::fprintf(stderr, "gpumeter run: error: %s\n", outcome->start_error->c_str());
    return outcome->exit_code;
  }
  const report::RunReport report = report::session_report(*outcome, &prices->catalog());
  if (!f.quiet) {
    const std::string text = report::render_run_report_text(report, simulated);
    std::fputs(text.c_str(), stderr);
  }
  if (f.json_report) {
    std::ofstream out(*f.json_report, std::ios::binary | std::ios::trunc);
    out << report::render_run_report_json(report);
    if (!out)
      std::fprintf(stderr, "gpumeter run: warning: cannot write --json-report %s\n", f.json_report->c_str());
  }
  return outcome->exit_code;
}

}  // namespace gm::cli
