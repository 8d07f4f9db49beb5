// stop_run and set_budget (gpumeter mcp --allow-control): a control datagram to the run's own supervisor on
// the socket its live view names — the same door as the notebook's budget change — then a wait for the view
// to show the change. Control reaches only the caller's own runs (root: every run).
#include <fmt/format.h>
#include <sys/stat.h>

#include <chrono>
#include <functional>
#include <thread>

#include "guard/control.h"
#include "mcp/tools.h"
#include "sys/proc.h"
#include "util/json_in.h"
#include "util/money.h"

namespace gm::mcp {

namespace {

using nlohmann::json;

std::string run_name(const agent::RunView& v) {
  return v.run_id > 0 ? fmt::format("run {} (pid {})", v.run_id, v.meter_pid)
                      : fmt::format("pid {}", v.meter_pid);
}

/// The live run `ref` names, when the caller may control it.
Result<agent::RunView> controllable(const ServerOptions& o, const RunRef& ref) {
  if (!ref.run_id && !ref.pid)
    return make_error(ErrorKind::usage, "give run_id or pid (list_runs names the runs)");
  auto v = find_live_run(o, ref);
  if (!v)
    return make_error(
        ErrorKind::not_found,
        fmt::format("no run going now is {} (runs directory {}): control reaches runs going now, "
                    "which publish their live view there",
                    ref.run_id ? fmt::format("run {}", *ref.run_id) : fmt::format("pid {}", *ref.pid),
                    o.runs_dir.empty() ? "(none)" : o.runs_dir));
  if (o.uid != 0 && v->uid != o.uid)
    return make_error(
        ErrorKind::usage,
        fmt::format("{} belongs to {}; gpumeter mcp runs as {}: control reaches only your own runs "
                    "(root reaches all)",
                    run_name(*v), v->user, sys::user_name(o.uid)));
  if (v->socket.empty())
    return make_error(
        ErrorKind::unavailable,
        fmt::format("{} publishes no control socket (a gpumeter older than run control)", run_name(*v)));
  // The socket must be the run owner's own: a view names its socket, and views live in a shared folder.
  struct stat st {};
  if (::lstat(v->socket.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode) || st.st_uid != v->uid)
    return make_error(
        ErrorKind::usage,
        fmt::format("{}'s view names a socket that is not a socket of {}: refused", run_name(*v), v->user));
  return *v;
}

/// Waits (polling the view) until `done` holds for the run's view or the view is gone; nullopt: timed out.
enum class Seen { confirmed, ended, timeout };
Seen wait_for(const ServerOptions& o, std::int64_t meter_pid,
              const std::function<bool(const agent::RunView&)>& done, agent::RunView& last) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(o.confirm_timeout_ms);
  while (true) {
    RunRef ref;
    ref.pid = meter_pid;
    auto v = find_live_run(o, ref);
    if (!v) return Seen::ended;
    last = *v;
    if (done(*v)) return Seen::confirmed;
    if (std::chrono::steady_clock::now() >= deadline) return Seen::timeout;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

json usd_json(const std::optional<MicroUsd>& m) {
  return m ? json(util::micros_to_usd(*m)) : json(nullptr);
}

}  // namespace

ToolResult stop_run(const nlohmann::json& args, const ServerOptions& options) {
  Args a(args);
  const RunRef ref = read_run_ref(a);
  const auto reason = a.string("reason", guard::kMaxStopReasonBytes);
  if (auto e = a.finish()) return tool_error(*e);
  if (!reason || reason->empty())
    return tool_error("argument 'reason': say why the run is stopped (it is recorded)");
  auto run = controllable(options, ref);
  if (!run) return tool_error(run.error().message);
  const bool already = run->stopping;
  if (auto sent = guard::send_control_datagram(
          run->socket, guard::stop_request_datagram({store::StopReason::mcp, *reason}));
      !sent)
    return tool_error("could not ask " + run_name(*run) + "'s supervisor: " + sent.error().message);
  agent::RunView last = *run;
  const Seen seen = wait_for(
      options, run->meter_pid, [](const agent::RunView& v) { return v.stopping; }, last);
  ToolResult r;
  r.structured = {{"run_id", run->run_id > 0 ? json(run->run_id) : json(nullptr)},
                  {"pid", run->meter_pid},
                  {"job_pid", run->job_pid > 0 ? json(run->job_pid) : json(nullptr)},
                  {"status", seen == Seen::confirmed ? "stopping"
                             : seen == Seen::ended   ? "ended"
                                                     : "asked"},
                  {"confirmed", seen != Seen::timeout},
                  {"stopped_by", "mcp"},
                  {"reason", *reason},
                  {"spent_usd", usd_json(last.cost_micros)}};
  if (already)
    r.text = run_name(*run) + " was already stopping; the request is recorded with it.";
  else if (seen == Seen::confirmed)
    r.text =
        run_name(*run) +
        " is stopping: its supervisor sent the stop signal to the job's main process, which has its grace "
        "period to write its checkpoint and exit before SIGKILL; the ledger records stopped_by mcp and the "
        "reason. run_status shows when it has ended.";
  else if (seen == Seen::ended)
    r.text = run_name(*run) + " has ended.";
  else
    r.text = run_name(*run) +
             "'s supervisor was asked to stop it but its view has not shown it yet; run_status "
             "tells whether it is stopping.";
  return r;
}

ToolResult set_budget(const nlohmann::json& args, const ServerOptions& options) {
  Args a(args);
  const RunRef ref = read_run_ref(a);
  const json* budget = a.raw("budget_usd");
  if (auto e = a.finish()) return tool_error(*e);
  if (!budget)
    return tool_error("argument 'budget_usd': the new budget in USD is required (e.g. 12.5 or \"12.50\")");
  // Exactly as --budget: a number's shortest decimal text, or a decimal string, through the one parser.
  Result<MicroUsd> micros = make_error(ErrorKind::usage, "not a number");
  if (auto n = util::json_number(budget))
    micros = util::usd_micros_of_number(*n);
  else if (auto s = util::json_string(budget))
    micros = util::parse_usd_micros(*s);
  if (!micros)
    return tool_error("argument 'budget_usd': not an amount of USD (e.g. 12.5 or \"12.50\"): " +
                      micros.error().message);
  if (*micros <= 0) return tool_error("argument 'budget_usd': the budget must be positive");
  auto run = controllable(options, ref);
  if (!run) return tool_error(run.error().message);
  const std::optional<MicroUsd> previous = run->budget_micros;
  if (auto sent = guard::send_control_datagram(run->socket, guard::budget_datagram(*micros, "mcp")); !sent)
    return tool_error("could not reach " + run_name(*run) + "'s supervisor: " + sent.error().message);
  agent::RunView last = *run;
  const MicroUsd wanted = *micros;
  const Seen seen = wait_for(
      options, run->meter_pid, [wanted](const agent::RunView& v) { return v.budget_micros == wanted; }, last);
  ToolResult r;
  r.structured = {{"run_id", run->run_id > 0 ? json(run->run_id) : json(nullptr)},
                  {"pid", run->meter_pid},
                  {"budget_usd", util::micros_to_usd(wanted)},
                  {"previous_budget_usd", usd_json(previous)},
                  {"spent_usd", usd_json(last.cost_micros)},
                  {"confirmed", seen == Seen::confirmed}};
  r.text =
      fmt::format("{}'s budget {} {} (was {})", run_name(*run),
                  seen == Seen::confirmed ? "is now" : "was asked to become", "$" + util::usd_decimal(wanted),
                  previous ? "$" + util::usd_decimal(*previous) : "none");
  if (last.cost_micros) {
    r.text += "; spent " + util::format_micros(*last.cost_micros);
    if (*last.cost_micros >= wanted) r.text += ", already over it: its supervisor stops it at its next check";
  }
  if (seen == Seen::ended) r.text += "; the run has ended meanwhile";
  r.text += ".";
  return r;
}

}  // namespace gm::mcp
