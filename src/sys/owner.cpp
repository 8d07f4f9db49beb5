#include "sys/owner.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <vector>

#include "util/file.h"

namespace gm::sys {

const char* to_string(OwnerKind kind) {
  switch (kind) {
    case OwnerKind::pod: return "pod";
    case OwnerKind::container: return "container";
    case OwnerKind::slurm_job: return "slurm_job";
    case OwnerKind::slurm_finished: return "slurm_finished";
    case OwnerKind::user: return "user";
    case OwnerKind::process: return "process";
    case OwnerKind::other: return "other";
    case OwnerKind::unresolved: break;
  }
  return "unresolved";
}

std::string Owner::key() const {
  std::string k = to_string(kind);
  for (const std::string* s : {&name, &pod_namespace, &pod, &container, &slurm_job, &slurm_account, &user}) {
    k += '\x1f';
    k += *s;
  }
  return k;
}

namespace {

bool is_hex(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
}
bool is_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
}
std::optional<std::uint32_t> to_u32(std::string_view s) {
  std::uint32_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || p != s.data() + s.size()) return std::nullopt;
  return v;
}
// A pod UID: 36 characters, hex and dashes (cgroupfs) or underscores (systemd).
std::optional<std::string> as_pod_uid(std::string_view s) {
  if (s.size() != 36) return std::nullopt;
  std::string out(s);
  for (char& c : out) {
    if (c == '_') c = '-';
    if (c != '-' && !std::isxdigit(static_cast<unsigned char>(c))) return std::nullopt;
  }
  return out;
}
bool strip_suffix(std::string_view& s, std::string_view suffix) {
  if (s.size() < suffix.size() || s.substr(s.size() - suffix.size()) != suffix) return false;
  s.remove_suffix(suffix.size());
  return true;
}
bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  std::size_t pos = 0;
  while (pos <= s.size()) {
    auto end = s.find(sep, pos);
    if (end == std::string_view::npos) end = s.size();
    if (end > pos) out.push_back(s.substr(pos, end - pos));
    pos = end + 1;
  }
  return out;
}

/// A Slurm SLUID: "s" and 13 upper-case base-32 characters (s8FXKTA79XAR00).
bool is_sluid(std::string_view c) {
  if (c.size() != 14 || c[0] != 's') return false;
  for (char ch : c.substr(1))
    if (!((ch >= '0' && ch <= '9') || (ch >= 'A' && ch <= 'Z'))) return false;
  return true;
}

void parse_path(std::string_view path, CgroupFacts& f) {
  const auto parts = split(path, '/');
  bool slurm = false;
  for (std::string_view c : parts) {
    if (starts_with(c, "slurm")) slurm = true;  // slurm, slurm_<node>, slurmstepd.scope
    // Kubernetes pod: cgroupfs "pod<uid>", systemd "kubepods-<qos>-pod<uid_>.slice".
    if (starts_with(c, "pod")) {
      if (auto uid = as_pod_uid(c.substr(3))) f.pod_uid = uid;
    }
    if (starts_with(c, "kubepods")) {
      std::string_view v = c;
      if (strip_suffix(v, ".slice")) {
        const auto p = v.rfind("-pod");
        if (p != std::string_view::npos)
          if (auto uid = as_pod_uid(v.substr(p + 4))) f.pod_uid = uid;
      }
    }
    // Containers: cgroupfs "<64 hex>" (docker, kubepods), systemd "<runtime>-<id>.scope".
    if (c.size() == 64 && is_hex(c)) f.container_id = std::string(c);
    {
      std::string_view v = c;
      if (strip_suffix(v, ".scope")) {
        for (std::string_view runtime : {"docker-", "cri-containerd-", "crio-", "libpod-", "nerdctl-", "containerd-"}) {
          if (starts_with(v, runtime) && !starts_with(v, "crio-conmon-")) {
            const auto id = v.substr(runtime.size());
            if (id.size() >= 12 && is_hex(id)) f.container_id = std::string(id);
          }
        }
      }
    }
    // Slurm: /slurm/uid_1000/job_42/step_0 (v1), /system.slice/slurmstepd.scope/job_42/step_0 (v2); from
    // 26.05 the job's directory is its SLUID: /system.slice/slurmstepd.scope/s8FXKTA79XAR00/step_batch.
    if (slurm && starts_with(c, "job_") && is_digits(c.substr(4))) f.slurm_job = std::string(c.substr(4));
    if (slurm && is_sluid(c)) f.slurm_sluid = std::string(c);
    if (slurm && starts_with(c, "uid_")) f.slurm_uid = to_u32(c.substr(4));
    // systemd login sessions: user.slice/user-1000.slice/session-3.scope.
    {
      std::string_view v = c;
      if (starts_with(v, "user-") && strip_suffix(v, ".slice")) f.session_uid = to_u32(v.substr(5));
    }
    // The unit a job runs in: foo.service, or a transient scope (systemd-run --scope: run-u12.scope).
    {
      std::string_view v = c;
      const bool service = strip_suffix(v, ".service");
      const bool scope = !service && strip_suffix(v, ".scope");
      if ((service && !starts_with(v, "user@")) ||
          (scope && !starts_with(v, "session-") && v != "init" && !f.container_id))
        f.systemd_unit = std::string(v);
    }
  }
}

}  // namespace

CgroupFacts parse_cgroup(std::string_view text) {
  CgroupFacts f;
  for (std::string_view line : split(text, '\n')) {
    // hierarchy-ID:controller-list:path; the path may itself hold ':'.
    const auto a = line.find(':');
    if (a == std::string_view::npos) continue;
    const auto b = line.find(':', a + 1);
    if (b == std::string_view::npos) continue;
    std::string_view path = line.substr(b + 1);
    while (!path.empty() && (path.back() == '\r' || path.back() == ' ')) path.remove_suffix(1);
    parse_path(path, f);
  }
  return f;
}

std::optional<std::uint64_t> stat_start_ticks(std::string_view stat) {
  const auto close = stat.rfind(')');
  if (close == std::string_view::npos) return std::nullopt;
  // Fields after comm start at field 3 (state); starttime is field 22, the 20th after ')'.
  std::size_t pos = close + 1;
  for (int field = 0; field < 20; ++field) {
    while (pos < stat.size() && stat[pos] == ' ') ++pos;
    const std::size_t end = std::min(stat.find(' ', pos), stat.size());
    if (pos >= end) return std::nullopt;
    if (field == 19) {
      std::uint64_t v = 0;
      auto [p, ec] = std::from_chars(stat.data() + pos, stat.data() + end, v);
      if (ec != std::errc{}) return std::nullopt;
      return v;
    }
    pos = end;
  }
  return std::nullopt;
}

OwnerResolver::OwnerResolver(OwnerOptions options) : options_(std::move(options)), proc_(options_.proc_root) {}

std::string OwnerResolver::user_of(std::uint32_t uid) {
  auto it = users_.find(uid);
  if (it != users_.end()) return it->second;
  return users_[uid] = user_name(uid);
}

std::optional<OwnerResolver::Pod> OwnerResolver::find_pod(const std::string& uid) {
  DIR* d = opendir(options_.pod_log_root.c_str());
  if (!d) return std::nullopt;
  std::optional<Pod> found;
  const std::string suffix = "_" + uid;
  while (dirent* e = readdir(d)) {
    std::string_view n = e->d_name;
    if (!strip_suffix(n, suffix)) continue;
    const auto us = n.find('_');  // namespaces and pod names cannot hold '_'
    if (us == std::string_view::npos || us == 0 || us + 1 >= n.size()) continue;
    found = Pod{std::string(n.substr(0, us)), std::string(n.substr(us + 1))};
    break;
  }
  closedir(d);
  return found;
}

std::optional<std::string> OwnerResolver::find_container_name(const Pod& pod, const std::string& container_id) {
  // /var/log/containers/<pod>_<namespace>_<container>-<id>.log
  if (DIR* d = opendir(options_.container_log_root.c_str())) {
    std::optional<std::string> name;
    const std::string prefix = pod.name + "_" + pod.pod_namespace + "_";
    const std::string suffix = "-" + container_id + ".log";
    while (dirent* e = readdir(d)) {
      std::string_view n = e->d_name;
      if (!starts_with(n, prefix) || !strip_suffix(n, suffix)) continue;
      n.remove_prefix(prefix.size());
      if (!n.empty()) name = std::string(n);
      break;
    }
    closedir(d);
    if (name) return name;
  }
  return std::nullopt;
}

Owner OwnerResolver::resolve(std::uint32_t pid) {
  // A PID seen in the previous interval and checked recently keeps its owner: re-reading /proc for every
  // process every second is most of the agent's CPU. A PID that skips an interval is dropped by
  // end_interval(), so a stale answer needs the old process to exit and a new one with the same PID to open
  // the GPU within one interval (CUDA start-up alone takes longer); the start-time check catches even that.
  if (auto it = cache_.find(pid); it != cache_.end() && interval_ - it->second.checked_interval < kRecheckIntervals) {
    it->second.seen = true;
    return it->second.owner;
  }
  // Runs for every process every interval: one open+read of /proc/PID/stat, no streams, no allocation.
  char path[4096];
  const int plen = std::snprintf(path, sizeof path, "%s/%u/stat", options_.proc_root.c_str(), pid);
  char buf[1024];
  ssize_t n = -1;
  if (plen > 0 && static_cast<std::size_t>(plen) < sizeof path) {
    const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      n = ::read(fd, buf, sizeof buf);
      ::close(fd);
    }
  }
  if (n <= 0) {
    Owner o;
    o.kind = OwnerKind::unresolved;
    o.name = "unresolved";
    return o;
  }
  const auto start = stat_start_ticks(std::string_view(buf, static_cast<std::size_t>(n))).value_or(0);
  auto it = cache_.find(pid);
  if (it != cache_.end() && it->second.start_ticks == start) {
    it->second.seen = true;
    it->second.checked_interval = interval_;
    return it->second.owner;
  }
  const auto info = proc_.read(pid);
  Owner o;
  if (!info) {
    o.name = "unresolved";
    return o;
  }
  const CgroupFacts f = parse_cgroup(info->cgroup);
  std::optional<std::uint32_t> uid = info->uid;
  if (f.pod_uid) {
    o.kind = OwnerKind::pod;
    o.pod_uid = *f.pod_uid;
    const auto pod = find_pod(*f.pod_uid);
    if (pod) {
      o.pod_namespace = pod->pod_namespace;
      o.pod = pod->name;
    } else {
      o.pod = "pod-" + *f.pod_uid;
    }
    if (f.container_id) {
      o.container_id = *f.container_id;
      if (pod) o.container = find_container_name(*pod, *f.container_id).value_or("");
      if (o.container.empty()) o.container = f.container_id->substr(0, 12);
    }
    o.name = o.pod_namespace.empty() ? o.pod : o.pod_namespace + "/" + o.pod;
  } else if (f.container_id) {
    o.kind = OwnerKind::container;
    o.container_id = *f.container_id;
    o.container = f.container_id->substr(0, 12);
    o.name = o.container;
  } else {
    std::optional<std::string> job = f.slurm_job;
    // proctrack/linuxproc and similar set-ups leave no cgroup trace, and Slurm 26.05 names the cgroup by the
    // job's SLUID: the job's environment names its id.
    if (!job) {
      auto env = proc_.environ_var(pid, "SLURM_JOB_ID");
      if (env && is_digits(*env)) job = env;
    }
    // A SLUID cgroup whose environment cannot be read (another user's job, without root): the SLUID is the
    // job's name, so its GPUs are still the job's and not a stray process's.
    if (!job && f.slurm_sluid) job = f.slurm_sluid;
    if (job) {
      o.kind = OwnerKind::slurm_job;
      o.slurm_job = *job;
      o.name = *job;
      // The account is only in the job's environment (readable by root, or by the job's own user).
      if (auto account = proc_.environ_var(pid, "SLURM_JOB_ACCOUNT"); account && account->size() <= 64)
        o.slurm_account = *account;
      if (f.slurm_uid) uid = f.slurm_uid;
    } else if (f.systemd_unit) {
      // A job on a bare box (docs/agent.md "Jobs on a bare box"): the unit it was started in.
      o.kind = OwnerKind::process;
      o.name = *f.systemd_unit;
      if (f.session_uid) uid = f.session_uid;
    } else if (info->pgid > 0) {
      // Else its process group (a shell's job, nohup, a tmux pane, torchrun and its workers): named by the
      // leader's program and script, and the group id, so two `python3` jobs are two owners.
      o.kind = OwnerKind::process;
      std::string command;
      if (info->pgid == pid) {
        if (auto args = proc_.cmdline(pid, 16)) command = job_command(*args);
      } else if (auto args = proc_.cmdline(info->pgid, 16)) {
        command = job_command(*args);
      }
      if (command.empty()) command = info->comm.empty() ? "pid-" + std::to_string(pid) : info->comm;
      o.name = command + " (pgid " + std::to_string(info->pgid) + ")";
      if (f.session_uid) uid = f.session_uid;
    } else if (f.session_uid) {
      o.kind = OwnerKind::user;
      uid = f.session_uid;
    } else {
      o.kind = OwnerKind::process;
      o.name = info->comm.empty() ? "pid-" + std::to_string(pid) : info->comm;
    }
  }
  // A pod gets no `user`: the UID inside its container is the image's (often root), not a person, and a
  // pod must be one series whether it is seen through its processes or through a GPU it holds idle.
  if (uid && o.kind != OwnerKind::pod) o.user = user_of(*uid);
  if (o.kind == OwnerKind::user) o.name = o.user;
  cache_[pid] = Cached{start, o, true, interval_};
  return o;
}

std::string job_command(const std::vector<std::string>& args) {
  auto base = [](std::string_view a) {
    const auto slash = a.rfind('/');
    return slash == std::string_view::npos ? a : a.substr(slash + 1);
  };
  auto shown = [](std::string_view a) {
    if (a.empty() || a.size() > 64 || a.front() == '-' || a.front() == '.') return false;
    return std::all_of(a.begin(), a.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
    });
  };
  if (args.empty()) return "";
  const std::string_view program = base(args.front());
  if (!shown(program)) return "";
  std::string out(program);
  for (std::size_t i = 1; i < args.size(); ++i) {
    const std::string_view a = args[i];
    if (a.empty() || a.front() == '-') continue;
    // The first positional argument: the script or module; shown only when plainly a name.
    if (a.find_first_of("=@:") == std::string_view::npos && shown(base(a))) out += " " + std::string(base(a));
    break;
  }
  return out;
}

void OwnerResolver::end_interval() {
  ++interval_;
  for (auto it = cache_.begin(); it != cache_.end();) {
    if (!it->second.seen) {
      it = cache_.erase(it);
    } else {
      it->second.seen = false;
      ++it;
    }
  }
}

const char* to_string(SlurmAttribution::Method method) {
  switch (method) {
    case SlurmAttribution::Method::cgroup: return "cgroup";
    case SlurmAttribution::Method::environment: return "environment";
    case SlurmAttribution::Method::unavailable: return "unavailable";
    case SlurmAttribution::Method::none: break;
  }
  return "none";
}

std::optional<std::string> slurm_conf_value(std::string_view text, std::string_view key) {
  std::optional<std::string> found;
  for (std::string_view line : split(text, '\n')) {
    if (const auto hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.front()))) line.remove_prefix(1);
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.remove_suffix(1);
    const auto eq = line.find('=');
    if (eq == std::string_view::npos || eq != key.size()) continue;
    bool same = true;
    for (std::size_t i = 0; i < key.size(); ++i)
      same = same && std::tolower(static_cast<unsigned char>(line[i])) == std::tolower(static_cast<unsigned char>(key[i]));
    if (same) found = std::string(line.substr(eq + 1));  // the last setting wins, as in Slurm
  }
  return found;
}

SlurmAttribution slurm_attribution(const std::string& conf_path, bool is_root) {
  SlurmAttribution a;
  const auto text = util::read_small_file(conf_path);
  if (!text) {
    a.method = SlurmAttribution::Method::none;
    a.detail = "no " + conf_path + " (not a Slurm node); Slurm cgroup paths are still recognised" +
               (is_root ? ", and SLURM_JOB_ID in a process's environment" : "");
    return a;
  }
  a.conf_path = conf_path;
  a.proctrack = slurm_conf_value(*text, "ProctrackType");
  const std::string proctrack = a.proctrack.value_or("proctrack/cgroup");
  if (proctrack == "proctrack/cgroup") {
    a.method = SlurmAttribution::Method::cgroup;
    a.detail = "cgroup paths (" + proctrack + "): /slurm/uid_U/job_J/step_S (cgroup v1), slurmstepd.scope/job_J (v2)";
  } else if (is_root) {
    a.method = SlurmAttribution::Method::environment;
    a.detail = "SLURM_JOB_ID from /proc/PID/environ (" + proctrack + " puts jobs in no cgroup; readable as root)";
  } else {
    a.method = SlurmAttribution::Method::unavailable;
    a.detail = proctrack + " puts jobs in no cgroup and only root can read their environment: run the agent as root";
  }
  return a;
}

}  // namespace gm::sys
