// The run's live view for the node agent.
#include "cli/run_publish.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "agent/run_view.h"

namespace gm::cli {

namespace {

std::int64_t now_unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::optional<std::string> run_publish_dir() {
  std::error_code ec;
  if (const char* env = std::getenv("GPUMETER_RUNS_DIR"); env && *env) {
    std::filesystem::create_directories(env, ec);
    return std::string(env);
  }
  const std::string fallback = agent::default_runs_dir();
  if (std::filesystem::is_directory(fallback, ec)) return fallback;
  return std::nullopt;
}

PublishedSession::PublishedSession(guard::SessionSink& inner, std::string command) : inner_(inner) {
  if (auto dir = run_publish_dir()) publishing_.emplace(inner, *dir, std::move(command));
}

PublishingSink::PublishingSink(guard::SessionSink& inner, std::string dir, std::string command)
    : inner_(inner), dir_(std::move(dir)), command_(std::move(command)) {}

PublishingSink::~PublishingSink() {
  if (published_) agent::withdraw_run_view(dir_, ::getpid());
}

void PublishingSink::session_started(std::int64_t run_id, const std::string& socket_path,
                                     std::int64_t start_unix_ms) {
  run_id_ = run_id;
  socket_ = socket_path;
  start_unix_ms_ = start_unix_ms;
  inner_.session_started(run_id, socket_path, start_unix_ms);
}

void PublishingSink::status(const guard::StatusSnapshot& snapshot, bool periodic) {
  inner_.status(snapshot, periodic);
  const std::int64_t now = now_unix_ms();
  const std::optional<int> verdict =
      snapshot.target ? std::optional<int>(static_cast<int>(snapshot.target->forecast.verdict))
                      : std::nullopt;
  if (published_ && now - published_unix_ms_ < 1000 && verdict == published_verdict_ &&
      snapshot.budget_micros == published_budget_ && snapshot.stopping == published_stopping_)
    return;
  agent::RunView view;
  view.run_id = snapshot.run_id ? snapshot.run_id : run_id_;
  view.meter_pid = ::getpid();
  view.job_pid = snapshot.job_pid;
  view.start_unix_ms = start_unix_ms_;
  view.updated_unix_ms = now;
  view.command = command_;
  view.socket = socket_;
  view.stopping = snapshot.stopping;
  view.cost_micros = snapshot.spent_micros;
  view.usd_per_hour = snapshot.burn_usd_per_h;
  view.budget_micros = snapshot.budget_micros;
  view.steps = snapshot.step;
  view.total_steps = snapshot.total_steps;
  if (snapshot.forecast)
    view.forecast = agent::RunForecastView{snapshot.forecast->total_usd, snapshot.forecast->low_usd,
                                           snapshot.forecast->high_usd, snapshot.forecast->remaining_s};
  if (snapshot.target) view.target = agent::RunTargetView{snapshot.target->target, snapshot.target->forecast};
  if (auto r = agent::publish_run_view(dir_, view); !r) {
    if (!warned_) inner_.message("the node agent will not see this run: " + r.error().message, true);
    warned_ = true;
    return;
  }
  published_ = true;
  published_unix_ms_ = now;
  published_verdict_ = verdict;
  published_budget_ = snapshot.budget_micros;
  published_stopping_ = snapshot.stopping;
}

}  // namespace gm::cli
