// Which process listens on a TCP port: /proc/net/tcp{,6} give the socket inode of a LISTEN entry, the
// processes' fd links (socket:[INODE]) give its owner.
#include <dirent.h>
#include <unistd.h>

#include <charconv>
#include <sstream>

#include "serving/detail/proc_net.h"
#include "serving/serving.h"
#include "sys/proc.h"
#include "util/file.h"

namespace gm::serving {

std::uint16_t endpoint_port(const InferenceEndpointSpec& spec) {
  const std::string& s = spec.scheme_host_port;
  const bool https = s.rfind("https://", 0) == 0;
  const std::size_t colon = s.rfind(':');
  const std::size_t bracket = s.rfind(']');
  if (colon == std::string::npos || colon < s.find("//") + 2 ||
      (bracket != std::string::npos && colon < bracket))
    return https ? 443 : 80;
  unsigned port = 0;
  const auto [end, ec] = std::from_chars(s.data() + colon + 1, s.data() + s.size(), port);
  if (ec != std::errc() || end != s.data() + s.size() || port == 0 || port > 65535) return https ? 443 : 80;
  return static_cast<std::uint16_t>(port);
}

void detail::listen_table(const std::string& table, std::map<std::string, std::uint16_t>& out) {
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

std::optional<std::uint32_t> find_listening_pid(const std::string& proc_root, std::uint16_t port) {
  std::map<std::string, std::uint16_t> by_link;
  for (const char* table : {"/net/tcp", "/net/tcp6"})
    if (auto text = util::read_small_file(proc_root + table)) detail::listen_table(*text, by_link);
  std::vector<std::string> targets;
  for (const auto& [link, p] : by_link)
    if (p == port) targets.push_back(link);
  if (targets.empty()) return std::nullopt;
  const sys::ProcReader proc(proc_root);
  for (std::uint32_t pid : proc.pids()) {
    const std::string dir = proc_root + "/" + std::to_string(pid) + "/fd";
    DIR* d = ::opendir(dir.c_str());
    if (!d) continue;
    bool hit = false;
    while (dirent* ent = ::readdir(d)) {
      if (ent->d_name[0] == '.') continue;
      char buf[64];
      const ssize_t n = ::readlink((dir + "/" + ent->d_name).c_str(), buf, sizeof buf);
      if (n <= 0 || n >= static_cast<ssize_t>(sizeof buf)) continue;
      const std::string_view link(buf, static_cast<std::size_t>(n));
      for (const auto& t : targets) hit = hit || link == t;
      if (hit) break;
    }
    ::closedir(d);
    if (hit) return pid;
  }
  return std::nullopt;
}

}  // namespace gm::serving
