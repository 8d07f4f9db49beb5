#pragma once
// Notifications of a supervised run's actions (--notify, --webhook), sent on detached threads so a hanging
// webhook never holds the run; the run waits for them a bounded time at its end.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "guard/guard.h"

namespace gm::guard {

/// How long a finished run waits for its notifications (a --notify command or webhook still running).
inline constexpr std::int64_t kNotifySettleMs = 2000;

class Notifications {
 public:
  Notifications(std::optional<std::string> command, std::optional<std::string> webhook_url);
  /// Sends `event` to the --notify command and the webhook, each on a thread of its own.
  void send(const GuardEvent& event);
  /// Waits for notifications still in flight, at most `wait_ms`; returns the problems (failures, and those
  /// abandoned).
  std::vector<std::string> settle(std::int64_t wait_ms);

 private:
  struct InFlight;
  std::optional<std::string> command_, webhook_url_;
  std::shared_ptr<InFlight> in_flight_;
};

}  // namespace gm::guard
