// The price-list getter over the HTTP client seam, and the atomic write.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "prices/prices.h"

namespace gm::prices {

namespace {

std::string redact(const std::string& url) {
  const auto k = url.find("key=");
  if (k == std::string::npos) return url;
  const auto end = url.find('&', k);
  return url.substr(0, k + 4) + "…" + (end == std::string::npos ? "" : url.substr(end));
}

}  // namespace

Result<void> HttpGetter::get(const std::string& url, const HttpHeaders& headers, const BodySink& sink) {
  const auto scheme_end = url.find("://");
  if (scheme_end == std::string::npos ||
      (url.compare(0, scheme_end, "http") != 0 && url.compare(0, scheme_end, "https") != 0))
    return make_error(ErrorKind::usage, fmt::format("'{}' is not an http:// or https:// URL", url));
  const auto path_start = url.find('/', scheme_end + 3);
  util::HttpRequest request;
  request.scheme_host_port = path_start == std::string::npos ? url : url.substr(0, path_start);
  request.path = path_start == std::string::npos ? "/" : url.substr(path_start);
  request.connect_timeout = std::chrono::milliseconds(timeouts_.connect_ms);
  request.read_timeout = std::chrono::milliseconds(timeouts_.read_ms);
  request.follow_redirects = true;
  request.verify_server_certificate = true;
  request.headers = headers;
  int status = 0;
  bool stopped = false;
  request.on_status = [&](int s) {
    status = s;
    return s == 200;
  };
  request.sink = [&](std::string_view piece) {
    if (!sink(piece)) {
      stopped = true;
      return false;
    }
    return true;
  };
  const auto res = http_.send(request);
  if (!res && res.failure() == util::HttpFailure::invalid_url)
    return make_error(ErrorKind::usage, fmt::format("invalid URL '{}'", url));
  if (status != 0 && status != 200)
    return make_error(ErrorKind::unavailable, fmt::format("{}: HTTP status {}", redact(url), status));
  if (!res && !stopped)
    return make_error(ErrorKind::unavailable,
                      fmt::format("{}: {}", redact(url), util::http_failure_text(res.failure())));
  if (stopped)
    return make_error(ErrorKind::unavailable, fmt::format("{}: the answer was too large", redact(url)));
  return ok_result();
}

std::unique_ptr<HttpGetter> make_http_getter(HttpTimeouts timeouts, util::HttpClient& http) {
  return std::make_unique<HttpGetter>(http, timeouts);
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
