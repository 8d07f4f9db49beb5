#pragma once
// The guard of `gpumeter run`: progress intake (datagram JSON and the job's own output), the forecaster
// (DESIGN §3) and the budget policy (warn / stop on budget, forecast, idle), plus action notification.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "meter/run_meter.h"
#include "util/money.h"
#include "util/result.h"

namespace gm {

// ---- progress intake -------------------------------------------------------------------------

/// One progress report from the job (every field optional).
struct ProgressUpdate {
  std::optional<std::int64_t> step;
  std::optional<std::int64_t> total_steps;
  std::optional<std::int64_t> samples;
  std::optional<std::int64_t> tokens;
  std::map<std::string, double> metrics;
  /// True when nothing at all was reported.
  bool empty() const { return !step && !total_steps && !samples && !tokens && metrics.empty(); }
};

/// Parses one progress datagram: a JSON object with optional non-negative integer `step`, `total_steps`,
/// `samples`, `tokens` and an object `metrics` of numbers. ErrorKind::usage with the reason otherwise.
Result<ProgressUpdate> parse_progress_message(std::string_view datagram);

/// One progress counter recognised in a line of the job's output.
struct BarReading {
  std::string key;                     ///< the bar's identity: its description, epoch numbers replaced by '#'
  std::optional<std::int64_t> n;       ///< "45" of "45/100 ["; absent for a bare "Epoch 2/3" line
  std::optional<std::int64_t> total;   ///< "100" of "45/100 ["
  std::optional<std::int64_t> epoch;   ///< "Epoch 2" in the description or alone on the line (as printed)
  std::optional<std::int64_t> epochs;  ///< "3" of "Epoch 2/3"
  std::map<std::string, double> metrics;  ///< tqdm postfix (loss=2.3) or a Trainer log dict
};

/// Parses one complete output line (no terminator, ANSI sequences allowed): a tqdm-style bar ("120/10000 ["
/// with its description, percentage and "|bar|" before it; Trainer, Lightning and Keras bars have this form),
/// a bare "Epoch 2/3" line (accelerate, Keras), or a Trainer log dict (metrics only). nullopt otherwise.
std::optional<BarReading> parse_bar_line(std::string_view line);

/// Combines the bars of a job's output into one global progress (DESIGN §5): bars are told apart by identity
/// (description and total); a bar that appears while an unfinished one is open and that one has not
/// advanced on its own is nested in it (an epoch bar around a step bar) and global progress is
/// outer × inner; a bar that appears inside a bar that advances on its own (an evaluation bar inside the
/// Trainer's step bar) is a side bar and gives no steps. "Epoch e/E" lines and "Epoch e" descriptions add
/// an epoch level. When the nesting changes, the global total changes with it (the forecaster starts over).
class ProgressTracker {
 public:
  /// The global progress after `reading`; nullopt when it carries nothing (a side bar without metrics).
  std::optional<ProgressUpdate> add(const BarReading& reading);

 private:
  struct Bar {
    std::string key;
    std::int64_t n = 0;
    std::optional<std::int64_t> total;
    bool advanced_alone = false;     ///< advanced while no bar was open inside it
    bool side = false;               ///< opened inside a bar that advances alone: not a step level
    std::int64_t children_done = 0;  ///< inner loops finished since this bar last printed (tqdm throttles)
  };
  struct Level {
    std::string key;
    std::optional<std::int64_t> total;
  };
  std::optional<ProgressUpdate> global(std::map<std::string, double> metrics);

  std::vector<Bar> open_;              ///< outermost first
  std::vector<Level> levels_;          ///< the nesting of step levels seen so far, outermost first
  std::optional<std::int64_t> epoch_;  ///< 0-based epoch from "Epoch e" markers
  std::optional<std::int64_t> epochs_;
  std::optional<std::int64_t> epoch_base_;  ///< 0 or 1: how the job numbers its epochs
};

/// Recognises progress in a job's output with parse_bar_line and ProgressTracker. Output may arrive in any
/// chunks; lines end at '\n' or '\r'. Lines over 64 KiB are skipped.
class OutputProgressParser {
 public:
  /// Feeds bytes; returns the global updates recognised in the lines completed by them.
  std::vector<ProgressUpdate> feed(std::string_view bytes);

 private:
  std::string line_;
  bool overlong_ = false;
  ProgressTracker tracker_;
};

/// Parses one complete output line on its own (no nesting): the bar's own "N/M" as step and total.
std::optional<ProgressUpdate> parse_output_line(std::string_view line);

// The forecaster (Forecast, Forecaster) lives in meter/run_meter.h: reports replay it too.

// ---- budget policy ---------------------------------------------------------------------------

/// Guard configuration from the command line.
/// A team budget guarding a run (`gpumeter budget set`): the spend of every run matching `selector`, on every
/// machine writing the shared ledger, since the period's start.
struct TeamBudget {
  std::string selector;  ///< "team=nlp"
  std::string key;       ///< "team"
  std::string value;     ///< "nlp"
  std::string period;    ///< day | week | month
  MicroUsd limit_micros = 0;
  std::int64_t period_start_unix_ms = 0;
};

struct GuardConfig {
  std::optional<double> budget_usd;
  std::vector<TeamBudget> team_budgets;  ///< warned at warn_at_pct and stopped at like budget_usd
  std::vector<double> warn_at_pct{80.0};  ///< of the budget (actual spend)
  bool forecast_stop = false;
  std::optional<std::int64_t> max_idle_ms;  ///< every allocated GPU under kIdleUtilPct for this long
  /// Forecast-stop minimums: no forecast stop before this much run time and this many usable intervals.
  std::int64_t forecast_min_elapsed_ms = 5'000;
  std::size_t forecast_min_intervals = 5;
};

/// What the guard decided at one evaluation.
struct GuardDecision {
  std::string kind;        ///< "warn", "stop_budget", "stop_forecast", "stop_idle"
  std::string stopped_by;  ///< "" for warn, else "budget" | "forecast" | "idle"
  std::string message;     ///< one human sentence
};

/// The state the guard looks at.
struct GuardInput {
  std::int64_t elapsed_ms = 0;
  MicroUsd spent_micros = 0;
  std::optional<Forecast> forecast;
  std::size_t forecast_intervals = 0;
  std::optional<std::int64_t> idle_for_ms;  ///< how long every allocated GPU has been idle; nullopt = busy
  /// Per team budget (GuardConfig order): what the other runs of its selector spent, as of their last
  /// heartbeat; nullopt when it cannot be checked now (that budget is skipped).
  std::vector<std::optional<MicroUsd>> team_others_micros;
};

/// Evaluates the policy; each warning fires once, and at most one stop is returned (then it is latched).
class BudgetGuard {
 public:
  explicit BudgetGuard(GuardConfig config) : config_(std::move(config)) {}
  std::vector<GuardDecision> evaluate(const GuardInput& in);
  bool stopped() const { return stopped_; }
  const GuardConfig& config() const { return config_; }

 private:
  GuardConfig config_;
  std::vector<bool> warned_;
  std::vector<std::vector<bool>> team_warned_;
  bool stopped_ = false;
};

/// Parses "--warn-at 50%,80%" into percentages in (0, 100]; usage error naming the bad item.
Result<std::vector<double>> parse_warn_at(std::string_view text);

// ---- notification ----------------------------------------------------------------------------

/// An event sent to --notify and --webhook.
struct GuardEvent {
  std::int64_t run_id = 0;
  std::string kind;  ///< as GuardDecision::kind, or "sigterm" / "sigkill"
  std::string message;
  double cost_usd = 0;
  std::optional<double> budget_usd;
  std::optional<double> forecast_usd;
  std::string command;
  std::string host;
};

/// The environment given to the --notify command: GPUMETER_EVENT, GPUMETER_MESSAGE, GPUMETER_RUN_ID,
/// GPUMETER_COST_USD, GPUMETER_BUDGET_USD, GPUMETER_FORECAST_USD, GPUMETER_COMMAND, GPUMETER_HOST.
std::map<std::string, std::string> notify_environment(const GuardEvent& event);
/// The webhook body: a JSON object with a Slack-compatible "text" and the event's fields.
std::string webhook_body(const GuardEvent& event);
/// Runs `command` with /bin/sh -c and the event's environment, waiting at most `timeout_ms`.
Result<void> run_notify_command(const std::string& command, const GuardEvent& event,
                                std::int64_t timeout_ms = 10'000);
/// POSTs the event to an http:// or https:// URL (timeout `timeout_ms`); error on a non-2xx status.
Result<void> post_webhook(const std::string& url, const GuardEvent& event, std::int64_t timeout_ms = 5'000);

}  // namespace gm
