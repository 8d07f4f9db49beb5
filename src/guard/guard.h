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
#include "util/http_client.h"
#include "util/money.h"
#include "util/result.h"

namespace gm::guard {

// ---- progress intake -------------------------------------------------------------------------

/// One progress report from the job (every field optional).
struct ProgressUpdate {
  std::optional<std::int64_t> step;
  std::optional<std::int64_t> total_steps;
  std::optional<std::int64_t> samples;
  std::optional<std::int64_t> tokens;
  std::map<std::string, double> metrics;
  /// From the job's output: the unit of a step changed (the nesting of its bars was discovered or revised),
  /// so steps before and after are not comparable and the forecaster starts over.
  bool nesting_changed = false;
  /// From the job's output: why there is no total (or no step), in words for the status line; nullopt when
  /// the progress is unambiguous. Never a made-up total.
  std::optional<std::string> ambiguity;
  /// The job wrote a checkpoint (`"checkpoint": true` or its path; "" when no path was given).
  std::optional<std::string> checkpoint;
  /// Model FLOPs per token the job's tokens are measured with (`flops_per_token`, for MFU).
  std::optional<double> flops_per_token;
  /// True when nothing at all was reported.
  bool empty() const {
    return !step && !total_steps && !samples && !tokens && metrics.empty() && !ambiguity && !checkpoint &&
           !flops_per_token;
  }
};

/// Parses one progress datagram: a JSON object with optional non-negative integer `step`, `total_steps`,
/// `samples`, `tokens`, an object `metrics` of numbers, `checkpoint` (true, or the path written) and a
/// positive finite `flops_per_token`.
/// ErrorKind::usage with the reason otherwise.
Result<ProgressUpdate> parse_progress_message(std::string_view datagram);

/// One progress counter recognised in a line of the job's output.
struct BarReading {
  std::string key;                     ///< the bar's description, epoch numbers replaced by '#'
  std::optional<std::int64_t> n;       ///< "45" of "45/100 [" or "45it ["; absent for a bare "Epoch 2/3" line
  std::optional<std::int64_t> total;   ///< "100" of "45/100 ["; absent for "45it [" (unknown total)
  std::string unit;                    ///< "it", "samples", ... (from "it/s" or "45samples ["); "%" for a
                                       ///< percentage-only bar (rich's default columns: n of 100)
  int position = 0;                    ///< tqdm's `position`: the cursor-up moves that follow the bar
  std::optional<double> elapsed_s;     ///< "00:12" of "[00:12<00:40, ..." (tqdm's elapsed time)
  std::optional<std::int64_t> epoch;   ///< "Epoch 2" in the description or alone on the line (as printed)
  std::optional<std::int64_t> epochs;  ///< "3" of "Epoch 2/3"
  std::map<std::string, double>
      metrics;           ///< tqdm postfix (loss=2.3), Keras "- loss: 0.4", a Trainer log dict
  bool cleared = false;  ///< a blank redraw: tqdm erased the bar at `position` (leave=False, tqdm.write)
};

/// Parses one complete output line (no terminator, ANSI sequences allowed): a tqdm-style bar ("120/10000 ["
/// with its description, percentage and "|bar|" before it; Trainer, Lightning and Keras bars have this form;
/// "45it [00:01, 30it/s]" without a total), a rich.progress bar ("desc ━━━╺━━ 45/100" or "… 45%"), a bare
/// "Epoch 2/3" line (accelerate, Keras), or a Trainer log dict (metrics only). nullopt otherwise.
std::optional<BarReading> parse_bar_line(std::string_view line);

/// Combines the bars of a job's output into one global progress (DESIGN §5, docs/run.md "Nested bars").
/// A bar is identified by its description (epoch numbers as '#'), total, unit and position, never by the
/// description alone; a bar that goes back to 0 (or whose elapsed time restarts) is a new pass of the same
/// loop, one that goes back a little is another process's copy and is not counted twice. A bar that opens
/// inside an unfinished bar that has not advanced on its own is nested in it (outer × inner); the outer bar
/// must then advance only when an inner pass completes: if it advances while the inner bar is mid-pass and
/// the inner bar then continues, the two are parallel and the nesting is revised. A bar opening inside a bar
/// that advances alone is a side bar (metrics only). Invariants of every update: step <= total; the step
/// never goes back unless `nesting_changed` says so; no total when the output does not give one.
class ProgressTracker {
 public:
  /// The global progress after `reading` seen at `now_s` (any monotonic seconds); nullopt when it carries
  /// nothing (a side bar without metrics, a lagging copy).
  std::optional<ProgressUpdate> add(const BarReading& reading, double now_s = 0);

 private:
  struct Bar {
    std::string key;
    std::optional<std::int64_t> total;
    std::string unit;
    int position = 0;
    std::int64_t n = 0;
    std::optional<double> elapsed_s;
    std::optional<std::int64_t> epoch;  ///< from its description
    std::optional<std::int64_t> epochs;
    bool advanced_alone = false;     ///< advanced with no inner pass since its last advance
    bool inner_seen = false;         ///< a step bar inside it printed since it last advanced
    bool side = false;               ///< not a step level: metrics only
    bool contender = false;          ///< a side bar where an established level was: may replace it
    std::int64_t children_done = 0;  ///< inner passes finished since this bar last printed (throttling)
    std::int64_t pass_max = 0;       ///< the largest count of this pass (learns an unknown total)
    double first_s = 0;
  };
  struct Level {
    std::string key;
    std::optional<std::int64_t> total;
    std::string unit;
    std::optional<std::int64_t> learned_total;  ///< an unknown total learned from a completed pass
    double first_s = 0, last_s = 0;
  };
  static bool matches(const Bar& b, const BarReading& r);
  static bool renamed(const Bar& b, const BarReading& r);
  void learn(std::size_t depth, const Bar& b);
  void rename(std::size_t i, const std::string& key);
  static bool same_level(const Level& l, const Bar& b);
  bool restarts(const Bar& b, const BarReading& r) const;
  void revise(std::size_t keep_levels);
  std::optional<ProgressUpdate> global(std::map<std::string, double> metrics, double now_s);

  std::vector<Bar> open_;               ///< outermost first
  std::vector<Level> levels_;           ///< the nesting of step levels, outermost first
  std::vector<std::string> loop_keys_;  ///< bars that had a step bar nested in them (outer loops)
  std::optional<Bar> suspended_;        ///< an inner bar closed mid-pass when its outer bar advanced
  std::size_t suspended_depth_ = 0;
  std::optional<Bar> cleared_;  ///< a bar erased from the screen: back if it continues (tqdm.write)
  std::size_t cleared_depth_ = 0;
  std::int64_t cleared_parent_n_ = 0;
  std::int64_t top_passes_ = 0;            ///< restarts of the outermost bar
  std::optional<std::int64_t> bar_epoch_;  ///< 0-based epoch from the outermost bar's description
  std::optional<std::int64_t> bar_epochs_;
  std::optional<std::int64_t> line_epoch_;  ///< 0-based epoch from "Epoch e/E" lines
  std::optional<std::int64_t> epochs_;
  std::optional<std::int64_t> epoch_base_;  ///< 0 or 1: how the job numbers its epochs
  std::optional<std::int64_t> last_step_, last_total_;
  bool changed_ = false;  ///< the nesting changed since the last update
};

/// Recognises progress in a job's output with parse_bar_line and one ProgressTracker for all its streams
/// (a bar on stderr may be nested in one on stdout). Output may arrive in any chunks; lines end at '\n' or
/// '\r'. Lines over 64 KiB are skipped.
class OutputProgressParser {
 public:
  /// Feeds bytes of stream `stream` (0 stdout, 1 stderr) read at `now_s`; returns the global updates
  /// recognised in the lines completed by them.
  std::vector<ProgressUpdate> feed(std::string_view bytes, double now_s = 0, unsigned stream = 0);

 private:
  struct Line {
    std::string text;
    bool overlong = false;
  };
  Line lines_[2];
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
  store::BudgetPeriod period = store::BudgetPeriod::month;
  MicroUsd limit_micros = 0;
  std::int64_t period_start_unix_ms = 0;
};

struct GuardConfig {
  std::optional<MicroUsd> budget_micros;
  std::vector<TeamBudget> team_budgets;   ///< warned at warn_at_pct and stopped at like budget_micros
  std::vector<double> warn_at_pct{80.0};  ///< of the budget (actual spend)
  bool forecast_stop = false;
  std::optional<std::int64_t> max_idle_ms;  ///< every allocated GPU under kIdleUtilPct for this long
  /// Forecast-stop minimums: no forecast stop before this much run time and this many usable intervals.
  std::int64_t forecast_min_elapsed_ms = 5'000;
  std::size_t forecast_min_intervals = 5;
};

/// What the guard decided at one evaluation.
struct GuardDecision {
  store::ActionKind kind =
      store::ActionKind::warn;  ///< warn, target, or stop_budget | stop_forecast | stop_idle | ...
  std::optional<store::StopReason> stopped_by;  ///< set for a decision that stops the job
  std::string message;                   ///< one human sentence
};

/// The state the guard looks at.
struct GuardInput {
  std::int64_t elapsed_ms = 0;
  MicroUsd spent_micros = 0;
  std::optional<meter::Forecast> forecast;
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
  std::string kind;  ///< text_of(ActionKind) of a run's action, or a node guard event (autostop, ...)
  std::string message;
  MicroUsd cost_micros = 0;
  std::optional<MicroUsd> budget_micros;
  std::optional<double> forecast_usd;  ///< a forecast: a double
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
/// POSTs the event to an http:// or https:// URL through `http` (timeout `timeout_ms`); error on a non-2xx
/// status.
Result<void> post_webhook(const std::string& url, const GuardEvent& event, std::int64_t timeout_ms = 5'000,
                          util::HttpClient& http = util::system_http());

}  // namespace gm::guard
