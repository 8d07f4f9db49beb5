#pragma once
// HTTP client seam: every request gpumeter sends (price lists, cloud metadata services, serving engines, the
// kubelet, Prometheus, webhooks, the local agent) goes through HttpClient. The real client is cpp-httplib
// (util/http_client.cpp, the only file that names its client); tests use FakeHttpClient
// (tests/support/fake_http.h).
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gm::util {

/// Header or query parameter (name, value) pairs, in order.
using HttpFields = std::vector<std::pair<std::string, std::string>>;
/// Receives a response body piece by piece; returns false to stop the transfer.
using HttpBodySink = std::function<bool(std::string_view)>;

/// The request methods gpumeter sends.
enum class HttpMethod { get, post, put };

/// Why no HTTP answer came back (cpp-httplib's client errors, plus a URL the client cannot use).
enum class HttpFailure {
  unknown,
  invalid_url,
  connection,
  bind_ip_address,
  read,
  write,
  exceed_redirect_count,
  canceled,
  ssl_connection,
  ssl_loading_certs,
  ssl_server_verification,
  unsupported_multipart_boundary_chars,
  compression,
  connection_timeout,
};

/// One request. Unset timeouts keep cpp-httplib's defaults (connect 300 s, read 5 s, write 5 s).
struct HttpRequest {
  HttpMethod method = HttpMethod::get;
  std::string scheme_host_port;  ///< "http://host:port" or "https://host"
  std::string path = "/";        ///< as sent, with any query
  HttpFields params;             ///< query parameters the client URL-encodes after `path` (GET only)
  HttpFields headers;
  std::string body;  ///< POST and PUT
  std::string content_type;
  std::optional<std::chrono::microseconds> connect_timeout, read_timeout, write_timeout;
  bool follow_redirects = false;
  bool verify_server_certificate = true;  ///< https: the server's certificate chain and host name
  /// GET only: called with the status before the body; false stops the transfer (failure `canceled`).
  std::function<bool(int status)> on_status;
  /// GET only: when set, the body goes here instead of HttpResponse::body; false stops the transfer
  /// (failure `canceled`).
  HttpBodySink sink;

  /// scheme_host_port + path (+ "?name=value&..." unencoded, when params are given): for messages and fakes.
  std::string url() const;
};

/// An answer: any status (a 404 is an answer, not a failure).
struct HttpResponse {
  int status = 0;
  HttpFields headers;
  std::string body;  ///< empty when the request had a sink
};

/// An HttpResponse, or the HttpFailure that kept it from coming.
class HttpResult {
 public:
  HttpResult(HttpResponse response) : response_(std::move(response)) {}  // NOLINT: implicit by design
  HttpResult(HttpFailure failure) : failure_(failure) {}                 // NOLINT
  /// True when an answer came back.
  bool ok() const { return response_.has_value(); }
  explicit operator bool() const { return ok(); }
  /// The answer; only when ok().
  const HttpResponse& value() const { return *response_; }
  const HttpResponse& operator*() const { return *response_; }
  const HttpResponse* operator->() const { return &*response_; }
  /// The failure; only when !ok().
  HttpFailure failure() const { return failure_; }

 private:
  std::optional<HttpResponse> response_;
  HttpFailure failure_ = HttpFailure::unknown;
};

/// A user-facing description of a failure ("cannot connect (nothing listening, or the host is unreachable)").
std::string http_failure_text(HttpFailure failure);
/// cpp-httplib's short name of a failure ("Connection", "Read", "ConnectionTimeout", ...).
std::string http_failure_name(HttpFailure failure);

/// Sends HTTP requests. Implementations are safe to call from several threads at once.
class HttpClient {
 public:
  virtual ~HttpClient() = default;
  /// One exchange on a fresh connection, bounded by the request's timeouts.
  virtual HttpResult send(const HttpRequest& request) = 0;
};

/// The real client: cpp-httplib with OpenSSL, one connection per request, no proxy.
class SystemHttpClient final : public HttpClient {
 public:
  HttpResult send(const HttpRequest& request) override;
};

/// The process-wide real client (what the composition root hands to every caller).
HttpClient& system_http();

}  // namespace gm::util
