// Guarded connections for the agent's HTTP server. cpp-httplib 0.11 reads a request with a timeout per read
// call only and keeps every header line it is sent, on a pool of a few threads: a client trickling a byte
// every few seconds holds a thread for hours, a handful of them stall every scrape, and endless header lines
// grow the agent's memory without bound. Here each connection is read through a stream with a deadline and a
// byte budget per request, and is served on its own thread (up to a cap), while request parsing and routing
// stay cpp-httplib's.
#include "agent/http_connection.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace gm::agent::detail {
namespace {

using SteadyClock = std::chrono::steady_clock;

constexpr int kWriteTimeoutMs = 5000;
constexpr int kShutdownPollMs = 100;
constexpr int kListenBacklog = 512;

/// Milliseconds left until `deadline` (0 when past).
int ms_until(SteadyClock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 1 << 30));
}

/// Waits for `events` on `fd` at most `timeout_ms`; true when ready.
bool wait_fd(int fd, short events, int timeout_ms) {
  pollfd p{fd, events, 0};
  while (true) {
    const int r = ::poll(&p, 1, timeout_ms);
    if (r > 0) return true;
    if (r == 0 || errno != EINTR) return false;
  }
}

std::pair<std::string, int> address_of(int fd, bool peer) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  const int r = peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len)
                     : ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  if (r != 0) return {"", 0};
  char host[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
    ::inet_ntop(AF_INET, &v4->sin_addr, host, sizeof host);
    return {host, ntohs(v4->sin_port)};
  }
  if (a.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
    ::inet_ntop(AF_INET6, &v6->sin6_addr, host, sizeof host);
    return {host, ntohs(v6->sin6_port)};
  }
  return {"", 0};
}

/// One connection's bytes (plain or TLS on a non-blocking socket) with a read deadline and byte budget that
/// begin_request() resets for each request.
class GuardedStream final : public httplib::Stream {
 public:
  GuardedStream(int fd, SSL* ssl, const ConnectionLimits& limits) : fd_(fd), ssl_(ssl), limits_(limits) {}

  void begin_request() {
    deadline_ = SteadyClock::now() + std::chrono::milliseconds(limits_.request_deadline_ms);
    budget_ = limits_.max_request_bytes;
  }
  /// True once a read hit the deadline or the budget: the connection is closed after the error answer.
  bool cut_off() const { return cut_off_; }

  bool is_readable() const override {
    return (ssl_ && SSL_pending(ssl_) > 0) || wait_fd(fd_, POLLIN, ms_until(deadline_));
  }
  bool is_writable() const override { return wait_fd(fd_, POLLOUT, kWriteTimeoutMs); }

  ssize_t read(char* ptr, size_t size) override {
    if (budget_ == 0) return cut();  // the request is larger than any the agent answers
    size = std::min(size, budget_);
    while (true) {
      short want = POLLIN;
      if (ssl_) {
        const int n = SSL_read(ssl_, ptr, static_cast<int>(std::min<size_t>(size, 1 << 30)));
        if (n > 0) return take(static_cast<size_t>(n));
        const int e = SSL_get_error(ssl_, n);
        if (e == SSL_ERROR_ZERO_RETURN) return 0;
        if (e == SSL_ERROR_WANT_WRITE)
          want = POLLOUT;
        else if (e != SSL_ERROR_WANT_READ)
          return -1;
      } else {
        const ssize_t n = ::recv(fd_, ptr, size, 0);
        if (n > 0) return take(static_cast<size_t>(n));
        if (n == 0) return 0;
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
      }
      const int left = ms_until(deadline_);
      if (left == 0 || !wait_fd(fd_, want, left)) return cut();  // too slow: the request deadline passed
    }
  }

  ssize_t write(const char* ptr, size_t size) override {
    size_t done = 0;
    while (done < size) {
      short want = POLLOUT;
      if (ssl_) {
        const int n = SSL_write(ssl_, ptr + done, static_cast<int>(std::min<size_t>(size - done, 1 << 30)));
        if (n > 0) {
          done += static_cast<size_t>(n);
          continue;
        }
        const int e = SSL_get_error(ssl_, n);
        if (e == SSL_ERROR_WANT_READ)
          want = POLLIN;
        else if (e != SSL_ERROR_WANT_WRITE)
          return -1;
      } else {
        const ssize_t n = ::send(fd_, ptr + done, size - done, MSG_NOSIGNAL);
        if (n > 0) {
          done += static_cast<size_t>(n);
          continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
      }
      if (!wait_fd(fd_, want, kWriteTimeoutMs)) return -1;  // a client that stopped reading
    }
    return static_cast<ssize_t>(size);
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    std::tie(ip, port) = address_of(fd_, true);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    std::tie(ip, port) = address_of(fd_, false);
  }
  int socket() const override { return fd_; }

 private:
  ssize_t cut() {
    cut_off_ = true;
    return -1;
  }
  ssize_t take(size_t n) {
    budget_ -= n;
    return static_cast<ssize_t>(n);
  }

  int fd_;
  SSL* ssl_;
  ConnectionLimits limits_;
  SteadyClock::time_point deadline_{};
  size_t budget_ = 0;
  bool cut_off_ = false;
};

/// TLS handshake within the request deadline; nullptr when it fails or is too slow.
SSL* accept_tls(int fd, SSL_CTX* ctx, int deadline_ms) {
  SSL* ssl = SSL_new(ctx);
  if (!ssl) return nullptr;
  SSL_set_fd(ssl, fd);
  const auto deadline = SteadyClock::now() + std::chrono::milliseconds(deadline_ms);
  while (true) {
    const int r = SSL_accept(ssl);
    if (r == 1) return ssl;
    const int e = SSL_get_error(ssl, r);
    const short want = e == SSL_ERROR_WANT_READ ? POLLIN : e == SSL_ERROR_WANT_WRITE ? POLLOUT : 0;
    const int left = ms_until(deadline);
    if (want == 0 || left == 0 || !wait_fd(fd, want, left)) {
      SSL_free(ssl);
      return nullptr;
    }
  }
}

/// One thread per connection, at most `max` at once; connections beyond wait in order.
class ConnectionThreads final : public httplib::TaskQueue {
 public:
  explicit ConnectionThreads(std::size_t max) : max_(std::max<std::size_t>(1, max)) {}
  ~ConnectionThreads() override { shutdown(); }

  void enqueue(std::function<void()> fn) override {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(fn));
    if (queue_.size() > idle_ && threads_.size() < max_) threads_.emplace_back([this] { work(); });
    cv_.notify_one();
  }

  void shutdown() override {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }

 private:
  void work() {
    std::unique_lock lock(mu_);
    while (true) {
      ++idle_;
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      --idle_;
      if (queue_.empty()) return;  // stopping and nothing left to serve
      auto fn = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      fn();
      lock.lock();
    }
  }

  std::size_t max_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  std::vector<std::thread> threads_;
  std::size_t idle_ = 0;
  bool stopping_ = false;
};

/// cpp-httplib's server (plain or TLS) serving each connection through a GuardedStream. Overriding the
/// private virtual process_and_close_socket is how cpp-httplib lets a subclass own the connection; request
/// parsing and routing stay in its protected process_request.
template <class Base>
class GuardedServer final : public Base {
 public:
  template <class... Args>
  explicit GuardedServer(ConnectionLimits limits, Args&&... args)
      : Base(std::forward<Args>(args)...), limits_(limits) {
    // cpp-httplib makes the task queue when it starts listening: the moment to widen its listen backlog of 5,
    // which a burst of connections overflows (the kernel then delays the handshakes of honest scrapes by
    // seconds).
    this->new_task_queue = [this] {
      ::listen(this->svr_sock_, kListenBacklog);
      return new ConnectionThreads(limits_.max_threads);
    };
    this->set_payload_max_length(limits_.max_request_bytes);
  }

 private:
  bool process_and_close_socket(int sock) override {
    const int flags = ::fcntl(sock, F_GETFL, 0);
    ::fcntl(sock, F_SETFL, flags | O_NONBLOCK);
    SSL* ssl = nullptr;
    if constexpr (std::is_same_v<Base, httplib::SSLServer>) {
      ssl = accept_tls(sock, this->ssl_context(), limits_.request_deadline_ms);
      if (!ssl) return close_socket(sock, false);
    }
    GuardedStream stream(sock, ssl, limits_);
    bool ok = true;
    for (std::size_t left = this->keep_alive_max_count_; left > 0; --left) {
      // The first request may take the whole request deadline to start; later ones the keep-alive timeout.
      const int wait_ms = left == this->keep_alive_max_count_
                              ? limits_.request_deadline_ms
                              : static_cast<int>(this->keep_alive_timeout_sec_ * 1000);
      if (!wait_for_request(sock, ssl, wait_ms)) break;
      stream.begin_request();
      bool closed = false;
      std::function<void(httplib::Request&)> setup;
      if (ssl) setup = [ssl](httplib::Request& req) { req.ssl = ssl; };
      ok = this->process_request(stream, left == 1, closed, setup);
      if (!ok || closed || stream.cut_off()) break;
    }
    if (ssl) {
      if (ok) SSL_shutdown(ssl);
      SSL_free(ssl);
    }
    return close_socket(sock, ok);
  }

  /// Waits for the next request's first byte; false on timeout, a closed peer or a stopping server.
  bool wait_for_request(int fd, SSL* ssl, int timeout_ms) const {
    if (ssl && SSL_pending(ssl) > 0) return true;
    const auto deadline = SteadyClock::now() + std::chrono::milliseconds(timeout_ms);
    while (this->svr_sock_ != INVALID_SOCKET) {
      const int left = ms_until(deadline);
      if (left == 0) return false;
      if (wait_fd(fd, POLLIN, std::min(left, kShutdownPollMs))) return true;
    }
    return false;
  }

  static bool close_socket(int sock, bool ok) {
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
    return ok;
  }

  ConnectionLimits limits_;
};

}  // namespace

std::unique_ptr<httplib::Server> make_guarded_server(const std::string& cert_file,
                                                     const std::string& key_file, ConnectionLimits limits) {
  if (!cert_file.empty())
    return std::make_unique<GuardedServer<httplib::SSLServer>>(limits, cert_file.c_str(), key_file.c_str());
  return std::make_unique<GuardedServer<httplib::Server>>(limits);
}

}  // namespace gm::agent::detail
