// The runs' live views: written by `gpumeter run|attach`, read by the agent.
#include "agent/run_view.h"

#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "util/json.h"
#include "util/json_in.h"

namespace gm::agent {

using meter::TargetForecast;

namespace {

using nlohmann::json;

constexpr meter::TargetVerdict kVerdicts[] = {
    meter::TargetVerdict::too_early, meter::TargetVerdict::on_track, meter::TargetVerdict::reached,
    meter::TargetVerdict::unreachable_within_steps, meter::TargetVerdict::unreachable_within_budget};

// The forecast's figures a view carries, each null when the forecast does not know it.
using Figure = std::optional<double> TargetForecast::*;
const std::pair<const char*, Figure> kFigures[] = {{"current_value", &TargetForecast::current_value},
                                                   {"reached_at_step", &TargetForecast::reached_at_step},
                                                   {"reached_at_s", &TargetForecast::reached_at_s},
                                                   {"cost_to_reach_usd", &TargetForecast::cost_to_reach_usd},
                                                   {"low_usd", &TargetForecast::low_usd},
                                                   {"high_usd", &TargetForecast::high_usd}};

std::optional<double> opt_number(const json& j, const char* key) {
  return util::json_number(j, key);
}

std::string user_name(uid_t uid) {
  struct passwd pw {};
  struct passwd* found = nullptr;
  char buf[1024];
  if (getpwuid_r(uid, &pw, buf, sizeof buf, &found) == 0 && found) return found->pw_name;
  return std::to_string(uid);
}

}  // namespace

std::string default_runs_dir() {
  const char* env = std::getenv("GPUMETER_RUNS_DIR");
  return env && *env ? env : "/run/gpumeter/runs";
}

std::string run_view_path(const std::string& dir, std::int64_t meter_pid) {
  return dir + "/run-" + std::to_string(meter_pid) + ".json";
}

std::string run_view_json(const RunView& view) {
  json j = {{"run_id", view.run_id},
            {"meter_pid", view.meter_pid},
            {"start_unix_ms", view.start_unix_ms},
            {"updated_unix_ms", view.updated_unix_ms},
            {"job_pid", view.job_pid},
            {"command", view.command},
            {"socket", view.socket},
            {"stopping", view.stopping},
            {"cost_micros", util::json_or_null(view.cost_micros)},
            {"usd_per_hour", util::json_or_null(view.usd_per_hour)},
            {"budget_micros", util::json_or_null(view.budget_micros)},
            {"steps", util::json_or_null(view.steps)},
            {"total_steps", util::json_or_null(view.total_steps)}};
  if (view.forecast)
    j["forecast"] = {{"total_usd", view.forecast->total_usd},
                     {"low_usd", view.forecast->low_usd},
                     {"high_usd", view.forecast->high_usd},
                     {"remaining_s", view.forecast->remaining_s}};
  if (view.target) {
    const auto& t = *view.target;
    json tj = {{"metric", t.target.metric},
               {"op", t.target.at_most ? "<=" : ">="},
               {"value", t.target.threshold},
               {"verdict", meter::verdict_name(t.forecast.verdict)},
               {"step", t.forecast.step}};
    for (const auto& [key, field] : kFigures) tj[key] = util::json_or_null(t.forecast.*field);
    j["target"] = std::move(tj);
  }
  return j.dump();
}

Result<RunView> parse_run_view(std::string_view text, const std::string& file_name) {
  const json j = json::parse(text, nullptr, false);
  auto bad = [&](const std::string& why) { return Error{ErrorKind::failure, file_name + ": " + why}; };
  if (!j.is_object()) return bad("not a JSON object");
  RunView v;
  for (auto [key, field] :
       {std::pair{"run_id", &v.run_id}, std::pair{"meter_pid", &v.meter_pid},
        std::pair{"start_unix_ms", &v.start_unix_ms}, std::pair{"updated_unix_ms", &v.updated_unix_ms}}) {
    const auto n = util::json_int(j, key);
    if (!n) return bad(std::string("no integer \"") + key + "\"");
    *field = *n;
  }
  if (v.meter_pid <= 0) return bad("\"meter_pid\" is not a PID");
  // The live figures (absent in views of older gpumeter runs: each stays unknown).
  v.job_pid = std::max<std::int64_t>(0, util::json_int(j, "job_pid").value_or(0));
  v.command = util::json_string(j, "command").value_or("");
  v.socket = util::json_string(j, "socket").value_or("");
  v.stopping = util::json_bool(j, "stopping").value_or(false);
  v.cost_micros = util::json_int(j, "cost_micros");
  v.usd_per_hour = opt_number(j, "usd_per_hour");
  v.budget_micros = util::json_int(j, "budget_micros");
  v.steps = util::json_int(j, "steps");
  v.total_steps = util::json_int(j, "total_steps");
  if (const json* fj = util::json_object(j, "forecast")) {
    const auto total = opt_number(*fj, "total_usd");
    const auto low = opt_number(*fj, "low_usd");
    const auto high = opt_number(*fj, "high_usd");
    const auto remaining = opt_number(*fj, "remaining_s");
    if (!total || !low || !high || !remaining) return bad("\"forecast\" without its four figures");
    v.forecast = RunForecastView{*total, *low, *high, *remaining};
  }
  auto tj = j.find("target");
  if (tj == j.end() || tj->is_null()) return v;
  if (!tj->is_object()) return bad("\"target\" is not an object");
  RunTargetView t;
  const auto metric = util::json_string(*tj, "metric");
  const auto op = util::json_string(*tj, "op");
  auto value = opt_number(*tj, "value");
  const auto verdict = util::json_string(*tj, "verdict");
  if (!metric || metric->empty()) return bad("target without a \"metric\"");
  if (!op || (*op != "<=" && *op != ">=")) return bad("target \"op\" is not <= or >=");
  if (!value) return bad("target without a numeric \"value\"");
  if (!verdict) return bad("target without a \"verdict\"");
  t.target.metric = *metric;
  t.target.at_most = *op == "<=";
  t.target.threshold = *value;
  const auto known = std::find_if(std::begin(kVerdicts), std::end(kVerdicts),
                                  [&](meter::TargetVerdict x) { return meter::verdict_name(x) == *verdict; });
  if (known == std::end(kVerdicts)) return bad("unknown target verdict \"" + *verdict + "\"");
  auto& f = t.forecast;
  f.verdict = *known;
  if (auto s = opt_number(*tj, "step")) f.step = static_cast<std::int64_t>(*s);
  for (const auto& [key, field] : kFigures) f.*field = opt_number(*tj, key);
  v.target = std::move(t);
  return v;
}

Result<void> publish_run_view(const std::string& dir, const RunView& view) {
  const std::string path = run_view_path(dir, view.meter_pid);
  const std::string tmp = path + ".tmp";
  const std::string text = run_view_json(view);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return Error{ErrorKind::failure, tmp + ": " + std::strerror(errno)};
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int saved = errno;
  ::close(fd);
  if (!written || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = written ? errno : saved;
    ::unlink(tmp.c_str());
    return Error{ErrorKind::failure, path + ": " + std::strerror(e)};
  }
  return {};
}

void withdraw_run_view(const std::string& dir, std::int64_t meter_pid) {
  ::unlink(run_view_path(dir, meter_pid).c_str());
}

bool process_alive(std::int64_t pid) {
  if (pid <= 0) return false;
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

std::vector<RunView> read_run_views(const std::string& dir, std::int64_t now_unix_ms,
                                    const std::function<bool(std::int64_t)>& meter_alive) {
  std::vector<RunView> out;
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec), end;
  for (; !ec && it != end && out.size() < kRunViewMaxRuns; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("run-", 0) != 0 || name.size() < 9 || name.substr(name.size() - 5) != ".json") continue;
    const int fd = ::open(it->path().c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) continue;
    struct stat st {};
    std::string text;
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
        static_cast<std::size_t>(st.st_size) <= kRunViewMaxBytes) {
      text.resize(static_cast<std::size_t>(st.st_size));
      const ssize_t n = ::read(fd, text.data(), text.size());
      text.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
    }
    ::close(fd);
    if (text.empty()) continue;
    auto view = parse_run_view(text, it->path().string());
    if (!view) continue;
    if (name != "run-" + std::to_string(view->meter_pid) + ".json") continue;  // a file copied under a PID
    if (now_unix_ms - view->updated_unix_ms > kRunViewStaleMs) continue;
    if (!meter_alive(view->meter_pid)) continue;
    view->user = user_name(st.st_uid);
    view->uid = st.st_uid;
    out.push_back(std::move(*view));
  }
  std::sort(out.begin(), out.end(),
            [](const RunView& a, const RunView& b) { return a.meter_pid < b.meter_pid; });
  return out;
}

}  // namespace gm::agent
