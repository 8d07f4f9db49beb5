// Notifications of a supervised run's actions: detached sender threads, and the bounded wait at the end.
#include "guard/notifications.h"

#include <fmt/format.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace gm::guard {

/// Shared with the detached threads, so it outlives a run that abandons them.
struct Notifications::InFlight {
  std::mutex mutex;
  std::condition_variable done;
  int pending = 0;
  std::vector<std::string> errors;
};

Notifications::Notifications(std::optional<std::string> command, std::optional<std::string> webhook_url)
    : command_(std::move(command)),
      webhook_url_(std::move(webhook_url)),
      in_flight_(std::make_shared<InFlight>()) {}

void Notifications::send(const GuardEvent& e) {
  auto start = [this](std::function<Result<void>()> send) {
    auto state = in_flight_;
    {
      std::lock_guard<std::mutex> lock(state->mutex);
      ++state->pending;
    }
    std::thread([state, send = std::move(send)] {
      auto r = send();
      std::lock_guard<std::mutex> lock(state->mutex);
      if (!r) state->errors.push_back(r.error().message);
      --state->pending;
      state->done.notify_all();
    }).detach();
  };
  if (command_) start([cmd = *command_, e] { return run_notify_command(cmd, e); });
  if (webhook_url_) start([url = *webhook_url_, e] { return post_webhook(url, e); });
}

std::vector<std::string> Notifications::settle(std::int64_t wait_ms) {
  std::unique_lock<std::mutex> lock(in_flight_->mutex);
  in_flight_->done.wait_for(lock, std::chrono::milliseconds(wait_ms),
                            [&] { return in_flight_->pending == 0; });
  std::vector<std::string> problems = std::move(in_flight_->errors);
  in_flight_->errors.clear();
  if (in_flight_->pending > 0)
    problems.push_back(fmt::format("{} notification(s) still in flight when the job ended were abandoned",
                                   in_flight_->pending));
  return problems;
}

}  // namespace gm::guard
