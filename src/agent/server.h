#pragma once
// The HTTP server: /metrics, the live page and /api/v1/owners over a collector, with TLS and basic auth
// from an exporter-toolkit web-config file.
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "agent/collector.h"

namespace gm::agent {

// ---- HTTP -----------------------------------------------------------------------------------------

/// An exporter-toolkit web configuration (the subset gpumeter supports).
struct WebConfig {
  std::string cert_file;                                ///< tls_server_config.cert_file (absolute)
  std::string key_file;                                 ///< tls_server_config.key_file (absolute)
  std::map<std::string, std::string> basic_auth_users;  ///< user → bcrypt hash
};

/// Parses a web-config YAML text; relative paths are taken relative to `base_dir`. Errors name line numbers.
Result<WebConfig> parse_web_config(std::string_view yaml, const std::string& file_name,
                                   const std::string& base_dir);
/// Loads and parses a web-config file.
Result<WebConfig> load_web_config(const std::string& path);
/// True when `password` matches the crypt(3) `hash` (bcrypt $2y$/$2b$/$2a$ and others libcrypt knows).
bool verify_password(const std::string& password, const std::string& hash);

/// HTTP server settings.
struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 9835;
  std::optional<WebConfig> web;
  std::string runs_dir;  ///< where runs publish their live views (agent/run_view.h); empty: no run series
};

/// Parses "HOST:PORT" or ":PORT" (host defaults to 127.0.0.1; "[::1]:PORT" for IPv6).
Result<ServeOptions> parse_listen(std::string_view text);

/// An HTTP server over a collector: /metrics, / (live page), /api/v1/owners.
class Server {
 public:
  Server(Collector& collector, ServeOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
  /// Binds; error (unavailable) names the address when it cannot.
  Result<void> bind();
  /// Serves until stop() (blocking).
  void listen();
  /// Stops listen() from another thread.
  void stop();
  /// The bound port.
  int port() const { return port_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  ServeOptions options_;
  int port_ = 0;
};

}  // namespace gm::agent
