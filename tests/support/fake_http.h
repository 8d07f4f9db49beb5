#pragma once
// The one fake HTTP client (util/http_client.h's seam): it records every request and answers from canned
// answers keyed by URL, or from a handler function; a failure (refused, timed out, TLS...) is injected like
// an answer. Header-only, so the fuzz targets use it too.
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "util/http_client.h"

namespace gm::test {

class FakeHttpClient final : public util::HttpClient {
 public:
  using Handler = std::function<util::HttpResult(const util::HttpRequest&)>;

  FakeHttpClient() = default;
  /// Every request is answered by `handler` (canned answers are then not consulted).
  explicit FakeHttpClient(Handler handler) : handler_(std::move(handler)) {}

  /// Answers `url` (scheme://host:port/path?query, as HttpRequest::url() spells it) with `status` and `body`.
  void answer(const std::string& url, int status, std::string body, util::HttpFields headers = {}) {
    std::lock_guard lock(mu_);
    canned_.insert_or_assign(
        url, util::HttpResult(util::HttpResponse{status, std::move(headers), std::move(body)}));
  }
  /// Fails every request for `url` with `failure` (connection, read for a read timeout, ...).
  void fail(const std::string& url, util::HttpFailure failure) {
    std::lock_guard lock(mu_);
    canned_.insert_or_assign(url, util::HttpResult(failure));
  }

  /// As the real client: a URL with no answer is refused (`connection`); a sink gets the body in two pieces
  /// (so readers see a body split at an arbitrary point) and stops it by returning false (`canceled`).
  util::HttpResult send(const util::HttpRequest& request) override {
    util::HttpResult result = util::HttpFailure::connection;
    {
      std::lock_guard lock(mu_);
      requests_.push_back(request);
      requests_.back().on_status = nullptr;
      requests_.back().sink = nullptr;
      if (!handler_) {
        if (auto it = canned_.find(request.url()); it != canned_.end()) result = it->second;
      }
    }
    if (handler_) result = handler_(request);
    if (!result || request.method != util::HttpMethod::get) return result;
    if (request.on_status && !request.on_status(result->status)) return util::HttpFailure::canceled;
    if (!request.sink) return result;
    const std::string& body = result->body;
    const std::size_t half = body.size() / 2;
    if (!request.sink(std::string_view(body).substr(0, half)) ||
        !request.sink(std::string_view(body).substr(half)))
      return util::HttpFailure::canceled;
    return util::HttpResponse{result->status, result->headers, std::string()};
  }

  /// Every request sent so far, in order (without its callbacks).
  std::vector<util::HttpRequest> requests() const {
    std::lock_guard lock(mu_);
    return requests_;
  }
  /// The URLs of every request sent so far, in order.
  std::vector<std::string> urls() const {
    std::lock_guard lock(mu_);
    std::vector<std::string> out;
    for (const auto& r : requests_) out.push_back(r.url());
    return out;
  }

 private:
  mutable std::mutex mu_;
  Handler handler_;
  std::map<std::string, util::HttpResult> canned_;
  std::vector<util::HttpRequest> requests_;
};

/// A 200 answer with `body` (for handlers).
inline util::HttpResult http_ok(std::string body) {
  return util::HttpResponse{200, {}, std::move(body)};
}
/// An answer with `status` and `body` (for handlers).
inline util::HttpResult http_answer(int status, std::string body = {}) {
  return util::HttpResponse{status, {}, std::move(body)};
}

}  // namespace gm::test
