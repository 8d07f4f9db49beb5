#pragma once
// Internal to the agent: the cpp-httplib server with guarded connections (see http_connection.cpp).
#include <httplib.h>

#include <memory>
#include <string>

namespace gm::agent::detail {

/// Limits on one client connection of the agent's HTTP server.
struct ConnectionLimits {
  int request_deadline_ms = 5000;  ///< to receive one whole request (line, headers, body) or a TLS handshake
  std::size_t max_request_bytes = 65536;  ///< bytes of one request; more and the connection is cut off
  std::size_t max_threads = 128;          ///< connections served at once; more wait for a free thread
};

/// A plain (no cert) or TLS cpp-httplib server whose connections are read with a deadline and a byte budget
/// per request, each on its own thread up to `max_threads`: slow, stalled or endless clients are cut off and
/// cannot starve scrapes or grow memory. Check is_valid() for TLS.
std::unique_ptr<httplib::Server> make_guarded_server(const std::string& cert_file,
                                                     const std::string& key_file,
                                                     ConnectionLimits limits = {});

}  // namespace gm::agent::detail
