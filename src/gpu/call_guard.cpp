#include "gpu/call_guard.h"

#include <thread>

namespace gm::gpu::nvml {

CallGuard::CallGuard(std::int64_t timeout_ms) : timeout_ms_(timeout_ms), hung_(std::make_shared<HungSet>()) {}

CallGuard::~CallGuard() {
  if (worker_) {
    std::lock_guard lock(worker_->mu);
    worker_->abandoned = true;  // the idle worker sees this and exits
    worker_->abandoned_key = -1;
    worker_->cv.notify_all();
  }
}

void CallGuard::start_worker() {
  worker_ = std::make_shared<Worker>();
  std::thread(loop, worker_, hung_).detach();
}

void CallGuard::loop(std::shared_ptr<Worker> worker, std::shared_ptr<HungSet> hung) {
  std::unique_lock lock(worker->mu);
  for (;;) {
    worker->cv.wait(lock, [&] { return worker->abandoned || (worker->job && !worker->job->done); });
    if (worker->job && !worker->job->done) {
      auto job = worker->job;
      lock.unlock();
      int result = job->task();
      lock.lock();
      job->result = result;
      job->done = true;
      worker->cv.notify_all();
    }
    if (worker->abandoned) {
      if (worker->abandoned_key >= 0) {
        std::lock_guard hung_lock(hung->mu);
        if (auto it = hung->keys.find(worker->abandoned_key); it != hung->keys.end()) hung->keys.erase(it);
      }
      return;
    }
  }
}

std::optional<int> CallGuard::run(int key, std::function<int()> task) {
  if (!worker_) start_worker();
  auto job = std::make_shared<Job>();
  job->task = std::move(task);
  std::unique_lock lock(worker_->mu);
  worker_->job = job;
  worker_->cv.notify_all();
  bool finished = worker_->cv.wait_for(lock, std::chrono::milliseconds(timeout_ms_), [&] { return job->done; });
  if (finished) return job->result;
  {
    std::lock_guard hung_lock(hung_->mu);
    hung_->keys.insert(key);
  }
  worker_->abandoned = true;
  worker_->abandoned_key = key;
  lock.unlock();
  worker_.reset();  // the next call starts a fresh worker
  return std::nullopt;
}

bool CallGuard::hung(int key) const {
  std::lock_guard lock(hung_->mu);
  return hung_->keys.count(key) != 0;
}

}  // namespace gm::gpu::nvml
