#pragma once
// Runs NVML calls on a worker thread with a deadline (internal to src/gpu). A call that overruns is
// abandoned: its worker keeps running it, detached, and a fresh worker serves the next calls. The
// caller learns which key (device) is hung until that call finally returns.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>

namespace gm::gpu::nvml {

class CallGuard {
 public:
  explicit CallGuard(std::int64_t timeout_ms);
  ~CallGuard();
  CallGuard(const CallGuard&) = delete;
  CallGuard& operator=(const CallGuard&) = delete;

  /// Runs `task` (which must own everything it touches) under the deadline. Returns its result, or
  /// nullopt when it overran: `key` is then hung until the task returns.
  std::optional<int> run(int key, std::function<int()> task);
  /// True while a call made for `key` has not returned.
  bool hung(int key) const;
  std::int64_t timeout_ms() const { return timeout_ms_; }

 private:
  struct Job {
    std::function<int()> task;
    int result = 0;
    bool done = false;
  };
  struct Worker {
    std::mutex mu;
    std::condition_variable cv;
    std::shared_ptr<Job> job;
    bool abandoned = false;
    int abandoned_key = 0;
  };
  struct HungSet {
    mutable std::mutex mu;
    std::multiset<int> keys;
  };
  void start_worker();
  static void loop(std::shared_ptr<Worker> worker, std::shared_ptr<HungSet> hung);

  std::int64_t timeout_ms_;
  std::shared_ptr<Worker> worker_;
  std::shared_ptr<HungSet> hung_;
};

}  // namespace gm::gpu::nvml
