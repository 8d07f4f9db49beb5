#include "sys/proc.h"

#include <dirent.h>
#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <map>
#include <sstream>

#include "util/file.h"

namespace gm::sys {

std::vector<std::uint32_t> ProcReader::pids() const {
  std::vector<std::uint32_t> out;
  DIR* d = opendir(root_.c_str());
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    const char* n = e->d_name;
    if (!*n) continue;
    bool digits = true;
    for (const char* p = n; *p; ++p) digits = digits && std::isdigit(static_cast<unsigned char>(*p));
    if (digits) out.push_back(static_cast<std::uint32_t>(std::stoul(n)));
  }
  closedir(d);
  return out;
}

std::optional<ProcInfo> ProcReader::read(std::uint32_t pid) const {
  const std::string dir = root_ + "/" + std::to_string(pid);
  auto stat = util::read_small_file(dir + "/stat");
  if (!stat) return std::nullopt;
  ProcInfo info;
  info.pid = pid;
  // stat: "pid (comm) state ppid pgrp ..." — comm may hold spaces and parentheses, so split at the last ')'.
  const auto close = stat->rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(stat->substr(close + 1));
  std::string state;
  long long ppid = 0, pgrp = 0;
  rest >> state >> ppid >> pgrp;
  info.ppid = static_cast<std::uint32_t>(ppid);
  info.pgid = static_cast<std::uint32_t>(pgrp);
  if (auto comm = util::read_small_file(dir + "/comm")) {
    info.comm = *comm;
    while (!info.comm.empty() && (info.comm.back() == '\n' || info.comm.back() == '\r')) info.comm.pop_back();
  } else {
    const auto open = stat->find('(');
    if (open != std::string::npos && close > open) info.comm = stat->substr(open + 1, close - open - 1);
  }
  if (auto status = util::read_small_file(dir + "/status")) {
    std::istringstream ss(*status);
    std::string line;
    while (std::getline(ss, line)) {
      if (line.rfind("Uid:", 0) == 0) {
        std::istringstream u(line.substr(4));
        unsigned long uid = 0;
        if (u >> uid) info.uid = static_cast<std::uint32_t>(uid);
        break;
      }
    }
  }
  info.cgroup = util::read_small_file(dir + "/cgroup").value_or("");
  return info;
}

std::optional<std::vector<std::string>> ProcReader::cmdline(std::uint32_t pid, std::size_t max_args) const {
  auto text = util::read_small_file(root_ + "/" + std::to_string(pid) + "/cmdline");
  if (!text || text->empty()) return std::nullopt;
  std::vector<std::string> args;
  std::size_t pos = 0;
  while (pos < text->size() && args.size() < max_args) {
    const auto end = text->find('\0', pos);
    args.emplace_back(text->substr(pos, (end == std::string::npos ? text->size() : end) - pos));
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  return args;
}

std::optional<std::string> ProcReader::environ_var(std::uint32_t pid, const std::string& name) const {
  auto env = util::read_small_file(root_ + "/" + std::to_string(pid) + "/environ");
  if (!env) return std::nullopt;
  const std::string key = name + "=";
  std::size_t pos = 0;
  while (pos < env->size()) {
    const auto end = env->find('\0', pos);
    const std::string_view entry(env->data() + pos, (end == std::string::npos ? env->size() : end) - pos);
    if (entry.substr(0, key.size()) == key) return std::string(entry.substr(key.size()));
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  return std::nullopt;
}

std::vector<std::uint32_t> ProcReader::descendants(std::uint32_t root_pid) const {
  // Only /proc/PID/stat is needed for the tree: one small read per process, every second.
  std::multimap<std::uint32_t, std::uint32_t> children;
  for (auto pid : pids()) {
    auto stat = util::read_small_file(root_ + "/" + std::to_string(pid) + "/stat");
    if (!stat) continue;
    const auto close = stat->rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat->substr(close + 1));
    std::string state;
    long long ppid = 0;
    if (rest >> state >> ppid) children.emplace(static_cast<std::uint32_t>(ppid), pid);
  }
  std::vector<std::uint32_t> out, stack{root_pid};
  while (!stack.empty()) {
    const auto p = stack.back();
    stack.pop_back();
    auto [b, e] = children.equal_range(p);
    for (auto it = b; it != e; ++it) {
      out.push_back(it->second);
      stack.push_back(it->second);
    }
  }
  return out;
}

bool ProcReader::exists(std::uint32_t pid) const {
  struct stat st {};
  return ::stat((root_ + "/" + std::to_string(pid)).c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::optional<std::vector<std::string>> ProcReader::fd_targets(std::uint32_t pid) const {
  const std::string dir = root_ + "/" + std::to_string(pid) + "/fd";
  DIR* d = opendir(dir.c_str());
  if (!d) return std::nullopt;
  std::vector<std::string> out;
  char buf[4096];
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    const ssize_t n = readlinkat(dirfd(d), e->d_name, buf, sizeof buf);
    if (n > 0) out.emplace_back(buf, static_cast<std::size_t>(n));
  }
  closedir(d);
  return out;
}

std::string user_name(std::uint32_t uid) {
  passwd pw{};
  passwd* result = nullptr;
  char buf[4096];
  if (getpwuid_r(uid, &pw, buf, sizeof buf, &result) == 0 && result) return pw.pw_name;
  return std::to_string(uid);
}

}  // namespace gm::sys

namespace gm::sys {

std::optional<std::string> ProcReader::start_ticks(std::uint32_t pid) const {
  auto stat = util::read_small_file(root_ + "/" + std::to_string(pid) + "/stat");
  if (!stat) return std::nullopt;
  const auto close = stat->rfind(')');
  if (close == std::string::npos) return std::nullopt;
  // Fields after the command: state (3) ... starttime (22).
  std::istringstream rest(stat->substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22; ++i)
    if (!(rest >> field)) return std::nullopt;
  if (field.empty() || field.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return field;
}

std::optional<std::int64_t> ProcReader::age_ms(std::uint32_t pid) const {
  auto ticks = start_ticks(pid);
  auto uptime = util::read_small_file(root_ + "/uptime");
  if (!ticks || !uptime) return std::nullopt;
  double up_s = 0;
  std::istringstream in(*uptime);
  if (!(in >> up_s)) return std::nullopt;
  const long hz = sysconf(_SC_CLK_TCK);
  if (hz <= 0) return std::nullopt;
  const double start_s = static_cast<double>(std::stoll(*ticks)) / static_cast<double>(hz);
  return static_cast<std::int64_t>(std::max(0.0, up_s - start_s) * 1000.0);
}

}  // namespace gm::sys
