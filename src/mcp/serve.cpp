// The stdio transport: newline-delimited messages in, one answer per line out. The reading thread answers
// at once what is quick (ping, initialize, tools/list, errors); tool calls run in order on one worker, so a
// ping is answered while a stop waits for its run.
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "mcp/mcp.h"

namespace gm::mcp {

namespace {

/// Writes whole answers, one per line, from any thread; remembers the first failure.
class Writer {
 public:
  explicit Writer(int fd) : fd_(fd) {}
  void line(const std::string& text) {
    std::lock_guard lock(mu_);
    if (failed_) return;
    std::string out = text;
    out.push_back('\n');
    std::size_t done = 0;
    while (done < out.size()) {
      const ssize_t n = ::write(fd_, out.data() + done, out.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        failed_ = std::string("writing the answers: ") + std::strerror(errno);
        return;
      }
      done += static_cast<std::size_t>(n);
    }
  }
  std::optional<std::string> failed() const {
    std::lock_guard lock(mu_);
    return failed_;
  }

 private:
  int fd_;
  mutable std::mutex mu_;
  std::optional<std::string> failed_;
};

/// Runs deferred tool calls in order, one at a time.
class Worker {
 public:
  explicit Worker(Writer& out) : out_(out), thread_([this] { loop(); }) {}
  ~Worker() {
    {
      std::lock_guard lock(mu_);
      closing_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void push(std::function<std::string()> job) {
    {
      std::lock_guard lock(mu_);
      jobs_.push_back(std::move(job));
    }
    cv_.notify_all();
  }

 private:
  void loop() {
    while (true) {
      std::function<std::string()> job;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [this] { return closing_ || !jobs_.empty(); });
        if (jobs_.empty()) return;  // closing, and every call answered
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      out_.line(job());
    }
  }

  Writer& out_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<std::string()>> jobs_;
  bool closing_ = false;
  std::thread thread_;
};

}  // namespace

Result<void> serve(int in_fd, int out_fd, const ServerOptions& options) {
  Session session(options);
  Writer out(out_fd);
  {
    Worker worker(out);
    std::string pending;    // bytes of the line being read
    bool skipping = false;  // the line is over the limit: its bytes are dropped up to the newline
    char buf[65536];
    while (!out.failed()) {
      const ssize_t n = ::read(in_fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;  // end of input (or a read error): the client has gone
      std::size_t start = 0;
      for (std::size_t i = 0; i < static_cast<std::size_t>(n); ++i) {
        if (buf[i] != '\n') continue;
        if (!skipping) {
          pending.append(buf + start, i - start);
          Session::Reply r = session.handle_line(pending);
          if (r.now) out.line(*r.now);
          if (r.later) worker.push(std::move(r.later));
        }
        pending.clear();
        skipping = false;
        start = i + 1;
      }
      if (!skipping) {
        pending.append(buf + start, static_cast<std::size_t>(n) - start);
        if (pending.size() > kMaxMessageBytes) {
          // Refused at once (the client learns it before sending the rest), the rest of the line skipped.
          out.line(session.oversized_reply());
          pending.clear();
          pending.shrink_to_fit();
          skipping = true;
        }
      }
    }
    // A last message without its newline is still a message.
    if (!skipping && !pending.empty()) {
      Session::Reply r = session.handle_line(pending);
      if (r.now) out.line(*r.now);
      if (r.later) worker.push(std::move(r.later));
    }
  }  // the worker answers every call queued before it stops
  if (auto failed = out.failed()) return make_error(ErrorKind::failure, *failed);
  return ok_result();
}

}  // namespace gm::mcp
