// The real HTTP client over cpp-httplib: the only place that builds an httplib::Client.
#include "util/http_client.h"

#include <httplib.h>

#include <stdexcept>

namespace gm::util {

namespace {

/// A failure, cpp-httplib's name of it (httplib::to_string, which also maps its errors to ours) and the
/// words messages give (nullptr: "request failed (NAME)").
struct FailureRow {
  HttpFailure failure;
  const char* name;
  const char* words;
};

constexpr FailureRow kFailures[] = {
    {HttpFailure::unknown, "Unknown", nullptr},
    {HttpFailure::invalid_url, "InvalidURL", nullptr},
    {HttpFailure::connection, "Connection", "cannot connect (nothing listening, or the host is unreachable)"},
    {HttpFailure::bind_ip_address, "BindIPAddress", nullptr},
    {HttpFailure::read, "Read", "the connection broke while reading the answer (or it timed out)"},
    {HttpFailure::write, "Write", "the connection broke while sending the request"},
    {HttpFailure::exceed_redirect_count, "ExceedRedirectCount", "too many redirects"},
    {HttpFailure::canceled, "Canceled", "request cancelled"},
    {HttpFailure::ssl_connection, "SSLConnection", "TLS handshake failed"},
    {HttpFailure::ssl_loading_certs, "SSLLoadingCerts", "cannot load the CA certificates"},
    {HttpFailure::ssl_server_verification, "SSLServerVerification",
     "the server's TLS certificate could not be verified"},
    {HttpFailure::unsupported_multipart_boundary_chars, "UnsupportedMultipartBoundaryChars", nullptr},
    {HttpFailure::compression, "Compression", nullptr},
    {HttpFailure::connection_timeout, "ConnectionTimeout", "connection timed out"},
};

const FailureRow* row_of(HttpFailure failure) {
  for (const auto& row : kFailures)
    if (row.failure == failure) return &row;
  return nullptr;
}

HttpFailure failure_of(httplib::Error error) {
  const std::string name = httplib::to_string(error);
  for (const auto& row : kFailures)
    if (name == row.name) return row.failure;
  return HttpFailure::unknown;
}

}  // namespace

std::string HttpRequest::url() const {
  std::string out = scheme_host_port + path;
  for (std::size_t i = 0; i < params.size(); ++i)
    out += (i == 0 ? "?" : "&") + params[i].first + "=" + params[i].second;
  return out;
}

std::string http_failure_name(HttpFailure failure) {
  const FailureRow* row = row_of(failure);
  return row ? row->name : "Invalid";
}

std::string http_failure_text(HttpFailure failure) {
  const FailureRow* row = row_of(failure);
  if (row && row->words) return row->words;
  return "request failed (" + http_failure_name(failure) + ")";
}

HttpResult SystemHttpClient::send(const HttpRequest& request) {
  std::optional<httplib::Client> client;
  try {
    client.emplace(request.scheme_host_port);
  } catch (const std::exception&) {  // cpp-httplib throws on a scheme it does not support
    return HttpFailure::invalid_url;
  }
  if (!client->is_valid()) return HttpFailure::invalid_url;
  if (request.connect_timeout) client->set_connection_timeout(*request.connect_timeout);
  if (request.read_timeout) client->set_read_timeout(*request.read_timeout);
  if (request.write_timeout) client->set_write_timeout(*request.write_timeout);
  if (request.follow_redirects) client->set_follow_location(true);
  client->enable_server_certificate_verification(request.verify_server_certificate);
  httplib::Headers headers;
  for (const auto& [k, v] : request.headers) headers.emplace(k, v);

  httplib::Result res{nullptr, httplib::Error::Unknown};
  std::string body;
  switch (request.method) {
    case HttpMethod::post:
      res = client->Post(request.path, headers, request.body, request.content_type);
      break;
    case HttpMethod::put:
      res = client->Put(request.path, headers, request.body, request.content_type);
      break;
    case HttpMethod::get: {
      auto on_status = [&](const httplib::Response& r) {
        return !request.on_status || request.on_status(r.status);
      };
      auto on_data = [&](const char* data, std::size_t n) {
        if (request.sink) return request.sink(std::string_view(data, n));
        body.append(data, n);
        return true;
      };
      if (!request.params.empty()) {
        httplib::Params params(request.params.begin(), request.params.end());
        res = client->Get(request.path, params, headers, on_status, on_data);
      } else {
        res = client->Get(request.path, headers, on_status, on_data);
      }
      break;
    }
  }
  if (!res) return failure_of(res.error());
  HttpResponse out;
  out.status = res->status;
  for (const auto& [k, v] : res->headers) out.headers.emplace_back(k, v);
  out.body = request.method == HttpMethod::get ? std::move(body) : res->body;
  return out;
}

HttpClient& system_http() {
  static SystemHttpClient client;
  return client;
}

}  // namespace gm::util
