// Discovery of serving engines' metrics endpoints: the TCP ports a set of processes listens on (from
// /proc/net/tcp{,6} and the processes' socket fds), probed once each for a /metrics that parses as one of
// the known engines.
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <sstream>

#include "agent/agent.h"
#include "sys/proc.h"

namespace gm::agent {
namespace {

/// Socket inode → port of the LISTEN (state 0A) entries of a /proc/net/tcp-format table.
void listen_table(const std::string& table, std::map<std::string, std::uint16_t>& out) {
  std::istringstream in(table);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string sl, local, remote, state, queues, timer, retr, uid, timeout, inode;
    if (!(f >> sl >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >> inode))
      continue;
    if (state != "0A" || inode == "0") continue;
    const std::size_t colon = local.rfind(':');
    if (colon == std::string::npos) continue;
    unsigned port = 0;
    const auto [end, ec] = std::from_chars(local.data() + colon + 1, local.data() + local.size(), port, 16);
    if (ec == std::errc() && end == local.data() + local.size() && port > 0 && port <= 65535)
      out["socket:[" + inode + "]"] = static_cast<std::uint16_t>(port);
  }
}

}  // namespace

std::vector<std::uint16_t> listening_ports(const std::string& proc_root,
                                           const std::set<std::uint32_t>& pids) {
  std::map<std::string, std::uint16_t> by_link;
  for (const char* table : {"/net/tcp", "/net/tcp6"})
    if (auto text = read_small_file(proc_root + table)) listen_table(*text, by_link);
  std::set<std::uint16_t> ports;
  if (by_link.empty()) return {};
  for (std::uint32_t pid : pids) {
    const std::string dir = proc_root + "/" + std::to_string(pid) + "/fd";
    DIR* d = ::opendir(dir.c_str());
    if (!d) continue;
    while (dirent* ent = ::readdir(d)) {
      if (ent->d_name[0] == '.') continue;
      char buf[64];
      const ssize_t n = ::readlink((dir + "/" + ent->d_name).c_str(), buf, sizeof buf);
      if (n <= 0 || n >= static_cast<ssize_t>(sizeof buf)) continue;
      if (auto it = by_link.find(std::string(buf, static_cast<std::size_t>(n))); it != by_link.end())
        ports.insert(it->second);
    }
    ::closedir(d);
  }
  return {ports.begin(), ports.end()};
}

std::optional<InferenceEndpointSpec> probe_engine_ports(const std::string& host,
                                                        const std::vector<std::uint16_t>& ports,
                                                        std::int64_t timeout_ms) {
  for (std::uint16_t port : ports) {
    const std::string url = "http://" + (host.find(':') != std::string::npos ? "[" + host + "]" : host) +
                            ":" + std::to_string(port) + "/metrics";
    auto spec = parse_inference_endpoint(url, "discovery");
    if (!spec) continue;
    if (scrape_endpoint(*spec, timeout_ms).reading) return *spec;
  }
  return std::nullopt;
}

}  // namespace gm::agent
