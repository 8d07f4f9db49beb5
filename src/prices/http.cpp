// The HTTP getters: cpp-httplib (with OpenSSL) for the network, a table for unit tests; and the atomic write.
#include <fcntl.h>
#include <fmt/format.h>
#include <httplib.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "prices/prices.h"
#include "util/http_error.h"

namespace gm::prices {

namespace {

class HttplibGetter final : public HttpGetter {
 public:
  explicit HttplibGetter(HttpTimeouts t) : timeouts_(t) {}

  Result<void> get(const std::string& url, const HttpHeaders& headers, const BodySink& sink) override {
    const auto scheme_end = url.find("://");
    if (scheme_end == std::string::npos ||
        (url.compare(0, scheme_end, "http") != 0 && url.compare(0, scheme_end, "https") != 0))
      return make_error(ErrorKind::usage, fmt::format("'{}' is not an http:// or https:// URL", url));
    const auto path_start = url.find('/', scheme_end + 3);
    const std::string base = path_start == std::string::npos ? url : url.substr(0, path_start);
    const std::string path = path_start == std::string::npos ? "/" : url.substr(path_start);
    httplib::Client client(base);
    if (!client.is_valid()) return make_error(ErrorKind::usage, fmt::format("invalid URL '{}'", url));
    client.set_connection_timeout(std::chrono::milliseconds(timeouts_.connect_ms));
    client.set_read_timeout(std::chrono::milliseconds(timeouts_.read_ms));
    client.set_follow_location(true);
    client.enable_server_certificate_verification(true);
    httplib::Headers h;
    for (const auto& [k, v] : headers) h.emplace(k, v);
    int status = 0;
    bool stopped = false;
    auto res = client.Get(
        path, h,
        [&](const httplib::Response& r) {
          status = r.status;
          return r.status == 200;
        },
        [&](const char* data, std::size_t n) {
          if (!sink(std::string_view(data, n))) {
            stopped = true;
            return false;
          }
          return true;
        });
    if (status != 0 && status != 200)
      return make_error(ErrorKind::unavailable, fmt::format("{}: HTTP status {}", redact(url), status));
    if (!res && !stopped)
      return make_error(ErrorKind::unavailable,
                        fmt::format("{}: {}", redact(url), http_error_text(res.error())));
    if (stopped)
      return make_error(ErrorKind::unavailable, fmt::format("{}: the answer was too large", redact(url)));
    return ok_result();
  }

 private:
  static std::string redact(const std::string& url) {
    const auto k = url.find("key=");
    if (k == std::string::npos) return url;
    const auto end = url.find('&', k);
    return url.substr(0, k + 4) + "…" + (end == std::string::npos ? "" : url.substr(end));
  }
  HttpTimeouts timeouts_;
};

}  // namespace

std::unique_ptr<HttpGetter> make_http_getter(HttpTimeouts timeouts) {
  return std::make_unique<HttplibGetter>(timeouts);
}

Result<void> FakeHttpGetter::get(const std::string& url, const HttpHeaders&, const BodySink& sink) {
  requested_.push_back(url);
  const auto it = answers_.find(url);
  if (it == answers_.end())
    return make_error(ErrorKind::unavailable, fmt::format("{}: could not connect", url));
  if (it->second.status != 200)
    return make_error(ErrorKind::unavailable, fmt::format("{}: HTTP status {}", url, it->second.status));
  // Two pieces, so readers see a body split at an arbitrary point.
  const std::string& body = it->second.body;
  const std::size_t half = body.size() / 2;
  if (!sink(std::string_view(body).substr(0, half)) || !sink(std::string_view(body).substr(half)))
    return make_error(ErrorKind::unavailable, fmt::format("{}: the answer was too large", url));
  return ok_result();
}

Result<void> write_file_atomically(const std::string& path, std::string_view text) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  std::error_code ec;
  if (target.has_parent_path()) {
    fs::create_directories(target.parent_path(), ec);
    if (ec)
      return make_error(
          fmt::format("{}: cannot create {}: {}", path, target.parent_path().string(), ec.message()));
  }
  std::string tmp = path + ".XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0)
    return make_error(fmt::format("{}: cannot create a temporary file: {}", path, std::strerror(errno)));
  auto fail = [&](const char* what) {
    const int e = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    return make_error(fmt::format("{}: {} {}: {}", path, what, tmp, std::strerror(e)));
  };
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return fail("cannot write");
    done += static_cast<std::size_t>(n);
  }
  if (::fchmod(fd, 0644) != 0) return fail("cannot set the mode of");
  if (::fsync(fd) != 0) return fail("cannot flush");
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    return make_error(fmt::format("{}: cannot close {}: {}", path, tmp, std::strerror(errno)));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    return make_error(fmt::format("{}: cannot rename {} over it: {}", path, tmp, std::strerror(e)));
  }
  if (target.has_parent_path()) {
    const int dir = ::open(target.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir >= 0) {
      ::fsync(dir);
      ::close(dir);
    }
  }
  return ok_result();
}

}  // namespace gm::prices
