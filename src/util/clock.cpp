#include "util/clock.h"

#include <chrono>
#include <thread>

namespace gm::util {

std::int64_t SystemClock::monotonic_ns() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::int64_t SystemClock::unix_ms() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void SystemClock::sleep_ns(std::int64_t ns) {
  if (ns > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(ns));
}

Clock& system_clock() {
  static SystemClock clock;
  return clock;
}

}  // namespace gm::util
