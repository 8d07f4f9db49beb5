// Action notification: --notify CMD (environment variables) and --webhook URL (JSON POST).
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>

#include "guard/guard.h"
#include "util/json.h"

extern char** environ;

namespace gm::guard {

std::map<std::string, std::string> notify_environment(const GuardEvent& e) {
  std::map<std::string, std::string> env{
      {"GPUMETER_EVENT", e.kind},
      {"GPUMETER_MESSAGE", e.message},
      {"GPUMETER_RUN_ID", std::to_string(e.run_id)},
      {"GPUMETER_COST_USD", util::usd_decimal(e.cost_micros, true)},
      {"GPUMETER_COMMAND", e.command},
      {"GPUMETER_HOST", e.host},
  };
  env["GPUMETER_BUDGET_USD"] = e.budget_micros ? util::usd_decimal(*e.budget_micros, true) : "";
  env["GPUMETER_FORECAST_USD"] = e.forecast_usd ? fmt::format("{:.6f}", *e.forecast_usd) : "";
  return env;
}

std::string webhook_body(const GuardEvent& e) {
  nlohmann::json j;
  j["text"] = fmt::format("gpumeter run {} on {}: {} — {}", e.run_id, e.host, e.kind, e.message);
  j["event"] = e.kind;
  j["message"] = e.message;
  j["run_id"] = e.run_id;
  j["cost_usd"] = util::micros_to_usd(e.cost_micros);
  j["budget_usd"] =
      e.budget_micros ? nlohmann::json(util::micros_to_usd(*e.budget_micros)) : nlohmann::json(nullptr);
  j["forecast_cost_usd"] = util::json_or_null(e.forecast_usd);
  j["command"] = e.command;
  j["host"] = e.host;
  return j.dump();
}

Result<void> run_notify_command(const std::string& command, const GuardEvent& event,
                                std::int64_t timeout_ms) {
  // Build the environment before fork: only async-signal-safe calls may follow it in a threaded process.
  std::vector<std::string> entries;
  const auto extra = notify_environment(event);
  for (char** e = environ; e && *e; ++e) {
    const std::string kv(*e);
    const auto eq = kv.find('=');
    if (eq != std::string::npos && extra.count(kv.substr(0, eq))) continue;
    entries.push_back(kv);
  }
  for (const auto& [k, v] : extra) entries.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& kv : entries) envp.push_back(kv.data());
  envp.push_back(nullptr);
  const char* argv[] = {"sh", "-c", command.c_str(), nullptr};
  // The command's output must not mix into the job's, nor hold gpumeter's pipes open after it exits.
  const int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  const pid_t pid = fork();
  if (pid < 0) {
    if (null_fd >= 0) close(null_fd);
    return make_error(std::string("--notify: fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    setpgid(0, 0);
    if (null_fd >= 0) {
      dup2(null_fd, STDIN_FILENO);
      dup2(null_fd, STDOUT_FILENO);
      dup2(null_fd, STDERR_FILENO);
    }
    execve("/bin/sh", const_cast<char* const*>(argv), envp.data());
    _exit(127);
  }
  if (null_fd >= 0) close(null_fd);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  int status = 0;
  while (true) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) return make_error(std::string("--notify: waitpid: ") + std::strerror(errno));
    if (std::chrono::steady_clock::now() > deadline) {
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      return make_error(fmt::format("--notify command timed out after {} ms", timeout_ms));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return ok_result();
  return make_error(fmt::format("--notify command exited with status {}",
                                WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status)));
}

Result<void> post_webhook(const std::string& url, const GuardEvent& event, std::int64_t timeout_ms,
                          util::HttpClient& http) {
  const auto scheme_end = url.find("://");
  if (scheme_end == std::string::npos ||
      (url.compare(0, scheme_end, "http") != 0 && url.compare(0, scheme_end, "https") != 0))
    return make_error(ErrorKind::usage, "--webhook: '" + url + "' is not an http:// or https:// URL");
  const auto path_start = url.find('/', scheme_end + 3);
  const std::string base = path_start == std::string::npos ? url : url.substr(0, path_start);
  const std::string path = path_start == std::string::npos ? "/" : url.substr(path_start);
  util::HttpRequest request;
  request.method = util::HttpMethod::post;
  request.scheme_host_port = base;
  request.path = path;
  request.body = webhook_body(event);
  request.content_type = "application/json";
  request.connect_timeout = request.read_timeout = request.write_timeout =
      std::chrono::milliseconds(timeout_ms);
  const auto res = http.send(request);
  if (!res && res.failure() == util::HttpFailure::invalid_url)
    return make_error(ErrorKind::usage, "--webhook: invalid URL '" + url + "'");
  if (!res)
    return make_error(ErrorKind::unavailable,
                      "--webhook " + url + ": " + util::http_failure_text(res.failure()));
  if (res->status < 200 || res->status >= 300)
    return make_error(ErrorKind::unavailable, fmt::format("--webhook {}: HTTP status {}", url, res->status));
  return ok_result();
}

}  // namespace gm::guard
