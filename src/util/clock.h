#pragma once
// Clock seam: the real clock and a fake one for tests.
#include <atomic>
#include <cstdint>

namespace gm::util {

/// Time source. Monotonic time for intervals, wall time for records.
class Clock {
 public:
  virtual ~Clock() = default;
  /// Monotonic nanoseconds since an arbitrary origin.
  virtual std::int64_t monotonic_ns() const = 0;
  /// Unix time in milliseconds.
  virtual std::int64_t unix_ms() const = 0;
  /// Blocks (or, for a fake clock, advances) for `ns` nanoseconds.
  virtual void sleep_ns(std::int64_t ns) = 0;
};

/// The system clock (steady_clock and system_clock).
class SystemClock final : public Clock {
 public:
  std::int64_t monotonic_ns() const override;
  std::int64_t unix_ms() const override;
  void sleep_ns(std::int64_t ns) override;
};

/// A clock that only moves when told; sleep_ns advances it.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(std::int64_t start_unix_ms = 1'700'000'000'000) : unix_start_ms_(start_unix_ms) {}
  std::int64_t monotonic_ns() const override { return now_ns_.load(); }
  std::int64_t unix_ms() const override { return unix_start_ms_ + now_ns_.load() / 1'000'000; }
  void sleep_ns(std::int64_t ns) override { now_ns_ += ns; }
  /// Moves the clock forward by `ns`.
  void advance_ns(std::int64_t ns) { now_ns_ += ns; }

 private:
  std::int64_t unix_start_ms_;
  std::atomic<std::int64_t> now_ns_{0};
};

/// The process-wide system clock.
Clock& system_clock();

}  // namespace gm::util
