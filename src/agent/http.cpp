// HTTP(S) server of the agent (cpp-httplib) and the exporter-toolkit web-config subset.
#include <crypt.h>
#include <httplib.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "agent/exposition.h"
#include "agent/http_connection.h"
#include "agent/server.h"
#include "util/embedded.h"
#include "util/file.h"
#include "util/units.h"

namespace gm::agent {

namespace {

std::string unquote(std::string_view v) {
  v = util::trim(v);
  if (v.size() >= 2 && ((v.front() == '"' && v.back() == '"') || (v.front() == '\'' && v.back() == '\'')))
    return std::string(v.substr(1, v.size() - 2));
  // A trailing comment on an unquoted scalar.
  const auto hash = v.find(" #");
  if (hash != std::string_view::npos) v = util::trim(v.substr(0, hash));
  return std::string(v);
}

std::string absolute(const std::string& base_dir, const std::string& p) {
  if (p.empty() || p.front() == '/') return p;
  return base_dir + "/" + p;
}

}  // namespace

Result<WebConfig> parse_web_config(std::string_view yaml, const std::string& file_name,
                                   const std::string& base_dir) {
  WebConfig cfg;
  std::string section;
  std::size_t line_no = 0;
  std::size_t pos = 0;
  auto err = [&](const std::string& what) {
    return make_error(ErrorKind::usage, file_name + ":" + std::to_string(line_no) + ": " + what);
  };
  while (pos <= yaml.size()) {
    auto end = yaml.find('\n', pos);
    if (end == std::string_view::npos) end = yaml.size();
    std::string_view line = yaml.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const std::string_view content = util::trim(line);
    if (content.empty() || content.front() == '#' || content == "---") continue;
    if (line.find('\t') != std::string_view::npos) return err("tabs are not allowed in YAML indentation");
    const std::size_t indent = line.find_first_not_of(' ');
    const auto colon = content.find(':');
    if (colon == std::string_view::npos) return err("expected 'key: value'");
    const std::string key = unquote(content.substr(0, colon));
    const std::string value = unquote(content.substr(colon + 1));
    if (indent == 0) {
      if (key != "tls_server_config" && key != "basic_auth_users" && key != "http_server_config")
        return err("unsupported key '" + key + "' (supported: tls_server_config, basic_auth_users)");
      if (!value.empty() && value != "{}" && value != "null") return err("'" + key + "' must be a mapping");
      section = key;
      continue;
    }
    if (section.empty()) return err("indented key '" + key + "' outside a section");
    if (section == "tls_server_config") {
      if (key == "cert_file")
        cfg.cert_file = absolute(base_dir, value);
      else if (key == "key_file")
        cfg.key_file = absolute(base_dir, value);
      else
        return err("unsupported tls_server_config key '" + key + "' (supported: cert_file, key_file)");
    } else if (section == "basic_auth_users") {
      if (value.empty()) return err("user '" + key + "' has no password hash");
      if (value.rfind("$2", 0) != 0)
        return err("user '" + key + "': password must be a bcrypt hash ($2y$...)");
      cfg.basic_auth_users[key] = value;
    } else {
      return err("http_server_config is not supported");
    }
  }
  if (cfg.cert_file.empty() != cfg.key_file.empty())
    return make_error(ErrorKind::usage, file_name + ": tls_server_config needs both cert_file and key_file");
  return cfg;
}

Result<WebConfig> load_web_config(const std::string& path) {
  auto text = util::read_small_file(path);
  if (!text) return make_error(ErrorKind::usage, "--web-config " + path + ": cannot read the file");
  const auto slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  auto cfg = parse_web_config(*text, path, dir);
  if (!cfg) return cfg;
  for (const std::string* f : {&cfg->cert_file, &cfg->key_file})
    if (!f->empty() && !util::read_small_file(*f))
      return make_error(ErrorKind::usage, "--web-config " + path + ": cannot read " + *f);
  return cfg;
}

bool verify_password(const std::string& password, const std::string& hash) {
  // crypt(3) reads C strings: "s3cret\0anything" would pass for "s3cret".
  if (password.find('\0') != std::string::npos) return false;
  crypt_data data;
  std::memset(&data, 0, sizeof data);
  const char* out = crypt_r(password.c_str(), hash.c_str(), &data);
  if (!out || out[0] == '*') return false;
  // Constant-time comparison of equal-length strings.
  const std::size_t n = std::strlen(out);
  if (n != hash.size()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < n; ++i) diff |= static_cast<unsigned char>(out[i] ^ hash[i]);
  return diff == 0;
}

Result<ServeOptions> parse_listen(std::string_view text) {
  ServeOptions o;
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos)
    return make_error(ErrorKind::usage, "--listen '" + std::string(text) + "': expected HOST:PORT");
  std::string host(text.substr(0, colon));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (!host.empty()) o.host = host;
  const std::string port(text.substr(colon + 1));
  int p = -1;
  try {
    std::size_t used = 0;
    p = std::stoi(port, &used);
    if (used != port.size()) p = -1;
  } catch (...) {
    p = -1;
  }
  if (p < 0 || p > 65535)
    return make_error(ErrorKind::usage, "--listen '" + std::string(text) + "': bad port '" + port + "'");
  o.port = p;
  return o;
}

namespace {

std::optional<std::string> base64_decode(std::string_view in) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  unsigned buf = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=') break;
    const int v = val(c);
    if (v < 0) return std::nullopt;
    buf = (buf << 6) | static_cast<unsigned>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((buf >> bits) & 0xFF);
    }
  }
  return out;
}

}  // namespace

struct Server::Impl {
  Impl(Collector& collector, const std::string& runs_dir) : exporter(collector, runs_dir) {}
  std::unique_ptr<httplib::Server> server;
  Exporter exporter;
};

Server::Server(Collector& collector, ServeOptions options)
    : impl_(std::make_unique<Impl>(collector, options.runs_dir)), options_(std::move(options)) {
  // Each connection gets a read deadline and byte budget per request (slow or endless clients are cut off).
  impl_->server = options_.web ? detail::make_guarded_server(options_.web->cert_file, options_.web->key_file)
                               : detail::make_guarded_server("", "");
  auto& srv = *impl_->server;
  srv.set_keep_alive_max_count(1000);
  srv.set_tcp_nodelay(true);  // headers and body are separate writes: avoid the 40 ms delayed-ACK stall
  if (options_.web && !options_.web->basic_auth_users.empty()) {
    const auto users = options_.web->basic_auth_users;
    srv.set_pre_routing_handler([users](const httplib::Request& req, httplib::Response& res) {
      const std::string auth = req.get_header_value("Authorization");
      if (auth.rfind("Basic ", 0) == 0) {
        if (auto cred = base64_decode(util::trim(std::string_view(auth).substr(6)))) {
          const auto colon = cred->find(':');
          if (colon != std::string::npos) {
            auto it = users.find(cred->substr(0, colon));
            if (it != users.end() && verify_password(cred->substr(colon + 1), it->second))
              return httplib::Server::HandlerResponse::Unhandled;
          }
        }
      }
      res.status = 401;
      res.set_header("WWW-Authenticate", "Basic realm=\"gpumeter\"");
      res.set_content("Unauthorized\n", "text/plain");
      return httplib::Server::HandlerResponse::Handled;
    });
  }
  srv.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(impl_->exporter.metrics_text(), "text/plain; version=0.0.4; charset=utf-8");
  });
  srv.Get("/api/v1/owners", [&collector](const httplib::Request&, httplib::Response& res) {
    res.set_content(owners_json(collector), "application/json");
  });
  // Whether every GPU has been idle for ?for=DURATION (`gpumeter idle`, schedulers' idleness checks).
  srv.Get("/v1/idle", [&collector](const httplib::Request& req, httplib::Response& res) {
    auto refuse = [&](const std::string& why) {
      res.status = 400;
      res.set_content(nlohmann::json({{"error", why}}).dump() + "\n", "application/json");
    };
    if (!req.has_param("for")) return refuse("missing ?for=DURATION (e.g. /v1/idle?for=30m)");
    const std::string text = req.get_param_value("for");
    const auto ms = util::parse_duration_ms(text);
    if (!ms) return refuse("for=" + text + ": " + ms.error().message);
    if (*ms <= 0) return refuse("for=" + text + ": the duration must be positive");
    res.set_content(idle_answer_json(collector.idle_answer(*ms)), "application/json");
  });
  // The live page (web/src/agent.html, embedded at build time) polls /api/v1/owners.
  static const std::string live_page(util::embedded_file("agent.html").value_or(std::string_view()));
  srv.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(live_page, "text/html; charset=utf-8");
  });
}

Server::~Server() = default;

Result<void> Server::bind() {
  auto& srv = *impl_->server;
  if (!srv.is_valid())
    return make_error(ErrorKind::usage, "TLS: cannot load the certificate or key of the web config");
  if (options_.port == 0) {
    port_ = srv.bind_to_any_port(options_.host);
    if (port_ <= 0)
      return make_error(ErrorKind::unavailable, "--listen " + options_.host + ":0: cannot bind");
  } else {
    if (!srv.bind_to_port(options_.host, options_.port))
      return make_error(
          ErrorKind::unavailable,
          "--listen " + options_.host + ":" + std::to_string(options_.port) + ": cannot bind (in use?)");
    port_ = options_.port;
  }
  return ok_result();
}

void Server::listen() {
  impl_->server->listen_after_bind();
}

void Server::stop() {
  impl_->server->stop();
}

}  // namespace gm::agent
