// list_runs and run_status: the runs going now (their live views) and the ledger's, and one run's report with
// the keys of `gpumeter report RUN --json`.
#include <fmt/format.h>

#include <set>

#include "catalog/catalog.h"
#include "mcp/tools.h"
#include "report/run_report.h"
#include "store/store.h"
#include "util/enum_text.h"
#include "util/json.h"
#include "util/json_in.h"
#include "util/units.h"

namespace gm::mcp {

namespace {

using nlohmann::json;

json usd_or_null(const std::optional<MicroUsd>& micros) {
  return micros ? json(util::micros_to_usd(*micros)) : json(nullptr);
}

json live_row(const agent::RunView& v) {
  return {{"run_id", v.run_id > 0 ? json(v.run_id) : json(nullptr)},
          {"pid", v.meter_pid},
          {"job_pid", v.job_pid > 0 ? json(v.job_pid) : json(nullptr)},
          {"status", "running"},
          {"stopping", v.stopping},
          {"command", v.command},
          {"user", v.user},
          {"cost_usd", usd_or_null(v.cost_micros)},
          {"usd_per_hour", util::json_or_null(v.usd_per_hour)},
          {"forecast_cost_usd", v.forecast ? json(v.forecast->total_usd) : json(nullptr)},
          {"budget_usd", usd_or_null(v.budget_micros)},
          {"steps", util::json_or_null(v.steps)},
          {"total_steps", util::json_or_null(v.total_steps)},
          {"started_unix_ms", v.start_unix_ms},
          {"live", true}};
}

json ledger_row(const store::RunRecord& r) {
  return {{"run_id", r.id},
          {"pid", nullptr},
          {"job_pid", nullptr},
          {"status", util::text_of(r.status)},
          {"command", r.command},
          {"user", r.user},
          {"cost_usd", util::micros_to_usd(r.cost_micros)},
          {"forecast_cost_usd", util::json_or_null(r.forecast_cost_usd)},
          {"budget_usd", usd_or_null(r.budget_micros)},
          {"steps", util::json_or_null(r.steps)},
          {"total_steps", util::json_or_null(r.total_steps)},
          {"started_unix_ms", r.start_unix_ms},
          {"live", false}};
}

std::string usd_text(const std::optional<MicroUsd>& micros) {
  return micros ? util::format_micros(*micros) : "n/a";
}

/// "run 12: $0.42 spent, $3.60/h, forecast $1.10 [$1.00-$1.30], ETA 5m 10s, step 120 of 1000, budget $2.00".
std::string live_text(const agent::RunView& v) {
  std::string out = v.run_id > 0 ? fmt::format("run {}", v.run_id) : fmt::format("pid {}", v.meter_pid);
  out += v.stopping ? " (stopping)" : " (running)";
  out += ": " + usd_text(v.cost_micros) + " spent";
  if (v.usd_per_hour) out += ", " + util::format_usd(*v.usd_per_hour) + "/h";
  if (v.forecast)
    out += fmt::format(", forecast {} [{}-{}], ETA {}", util::format_usd(v.forecast->total_usd),
                       util::format_usd(v.forecast->low_usd), util::format_usd(v.forecast->high_usd),
                       util::format_duration_s(v.forecast->remaining_s));
  if (v.steps)
    out += fmt::format(", step {}", *v.steps) + (v.total_steps ? fmt::format(" of {}", *v.total_steps) : "");
  if (v.budget_micros) out += ", budget " + util::format_micros(*v.budget_micros);
  return out;
}

}  // namespace

ToolResult list_runs(const nlohmann::json& args, const ServerOptions& options) {
  Args a(args);
  const std::int64_t limit = a.integer("limit", 1, 200).value_or(20);
  const auto status_text = a.string("status", 64);
  std::optional<store::RunStatus> status;
  if (status_text) {
    status = util::enum_from_text(store::kRunStatusTexts, *status_text);
    if (!status)
      a.fail("status", "'" + *status_text + "' is not one of " + util::enum_texts(store::kRunStatusTexts));
  }
  if (auto e = a.finish()) return tool_error(*e);

  json runs = json::array();
  std::set<std::int64_t> live_ids;
  std::vector<std::string> live_lines;
  if (!status || *status == store::RunStatus::running)
    for (const auto& v : live_runs(options)) {
      if (static_cast<std::int64_t>(runs.size()) >= limit) break;
      runs.push_back(live_row(v));
      if (v.run_id > 0) live_ids.insert(v.run_id);
      live_lines.push_back(live_text(v));
    }
  std::size_t from_ledger = 0;
  std::string ledger_note;
  std::vector<std::string> notes;
  auto ledger = store::open_ledger(options.ledger_path, /*create=*/false, notes);
  if (ledger) {
    store::RunFilter filter;
    // A status filter reads further back: the newest runs may all have another status.
    filter.limit = status ? 2000 : static_cast<std::size_t>(limit) + live_ids.size();
    auto records = (*ledger)->runs(filter);
    if (records) {
      for (const auto& r : *records) {
        if (static_cast<std::int64_t>(runs.size()) >= limit) break;
        if (live_ids.count(r.id) || (status && r.status != *status)) continue;
        runs.push_back(ledger_row(r));
        ++from_ledger;
      }
    } else {
      ledger_note = records.error().message;
    }
  } else if (ledger.error().kind != ErrorKind::not_found) {
    ledger_note = ledger.error().message;
  }
  ToolResult r;
  r.structured = {{"runs", runs}};
  if (!ledger_note.empty()) r.structured["ledger_error"] = ledger_note;
  r.text = live_lines.empty() ? "no run is going now" : fmt::format("{} going now: ", live_lines.size());
  for (std::size_t i = 0; i < live_lines.size(); ++i) r.text += (i ? "; " : "") + live_lines[i];
  r.text += fmt::format(". {} more from the ledger", from_ledger);
  if (!ledger_note.empty()) r.text += " (the ledger could not be read: " + ledger_note + ")";
  r.text += ".";
  return r;
}

ToolResult run_status(const nlohmann::json& args, const ServerOptions& options) {
  Args a(args);
  const RunRef ref = read_run_ref(a);
  if (auto e = a.finish()) return tool_error(*e);
  if (!ref.run_id && !ref.pid) return tool_error("give run_id or pid (list_runs names the runs)");
  const auto live = find_live_run(options, ref);
  if (live && ref.run_id && ref.pid && live->run_id != *ref.run_id)
    return tool_error(fmt::format("pid {} is run {}, not run {}", *ref.pid, live->run_id, *ref.run_id));
  std::int64_t run_id = ref.run_id.value_or(live ? live->run_id : 0);
  if (run_id <= 0) {
    if (live)
      return tool_error(
          fmt::format("the run metered by pid {} is not recorded in a ledger (it runs without "
                      "one); now: {}",
                      live->meter_pid, live_text(*live)));
    return tool_error(
        fmt::format("no run going now has pid {} (runs directory {}); a run that ended is named "
                    "by its run_id (list_runs)",
                    *ref.pid, options.runs_dir.empty() ? "(none)" : options.runs_dir));
  }
  std::vector<std::string> notes;
  auto ledger = store::open_ledger(options.ledger_path, /*create=*/false, notes);
  if (!ledger) return tool_error("the ledger: " + ledger.error().message);
  auto catalog = catalog::Catalog::builtin();
  auto report = report::load_run_report(**ledger, run_id, catalog ? &*catalog : nullptr);
  if (!report) {
    if (live)
      return tool_error(
          fmt::format("run {} is going now but is not in the ledger {} (it writes another "
                      "ledger: start gpumeter mcp with that --ledger); now: {}",
                      run_id, (*ledger)->describe(), live_text(*live)));
    return tool_error(fmt::format("run {}: {}", run_id, report.error().message));
  }
  auto parsed = util::json_parse(report::render_run_report_json(*report), "report");
  if (!parsed || !parsed->is_object())
    return tool_error("internal error: the report's JSON did not read back");
  ToolResult r;
  r.structured = std::move(*parsed);
  r.structured["live"] = live ? live_json(*live) : json(nullptr);
  if (live) {
    r.text = live_text(*live);
  } else {
    r.text = fmt::format("run {} {}: cost {}", run_id, report::describe_status(report->run),
                         util::format_micros(report->run.cost_micros));
    if (report->steps)
      r.text += fmt::format(", {} steps", *report->steps) +
                (report->total_steps ? fmt::format(" of {}", *report->total_steps) : "");
  }
  if (!report->findings.empty())
    r.text +=
        fmt::format("; {} finding(s), first: {}", report->findings.size(), report->findings.front().summary);
  r.text += ".";
  return r;
}

}  // namespace gm::mcp
