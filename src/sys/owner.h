#pragma once
// Owner attribution: which container, Kubernetes pod, Slurm job or user a process belongs to, from
// /proc/PID/cgroup (cgroup v1 and v2, cgroupfs and systemd drivers), the kubelet's log layout for pod
// names, and the process environment (SLURM_JOB_ID) where the cgroup says nothing. A process outside all
// of those is owned by its job (docs/agent.md "Jobs on a bare box"): its systemd unit, else its process
// group, named by the group leader's program and script ("python3 train.py (pgid 4242)"), never by the rest
// of its command line (options can hold secrets).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "sys/proc.h"

namespace gm::sys {

/// What kind of owner a process has.
enum class OwnerKind { pod, container, slurm_job, slurm_finished, user, process, unresolved, other };
/// "pod", "container", "slurm_job", "slurm_finished" (the agent's totals of a user's finished Slurm jobs),
/// "user", "process", "unresolved", "other" (owners beyond the exposed set).
const char* to_string(OwnerKind kind);

/// The owner of a process. Empty strings mean "not known".
struct Owner {
  OwnerKind kind = OwnerKind::unresolved;
  std::string name;            ///< the `owner` label: "ns/pod", container id (12 hex), job id, user, comm
  std::string pod_namespace;   ///< Kubernetes namespace
  std::string pod;             ///< Kubernetes pod name (or "pod-<uid>" when the name cannot be found)
  std::string pod_uid;
  std::string container;       ///< container name (Kubernetes) or short container id
  std::string container_id;    ///< full container id
  std::string slurm_job;
  std::string slurm_account;   ///< the job's account (SLURM_JOB_ACCOUNT, readable by root); label `account`
  std::string user;            ///< user name (or numeric uid when unknown to this machine)
  /// A stable key for maps: kind and every label.
  std::string key() const;
};

/// What cgroup paths say, before names are looked up.
struct CgroupFacts {
  std::optional<std::string> pod_uid;        ///< with dashes
  std::optional<std::string> container_id;   ///< 64-hex (or runtime's) id
  std::optional<std::string> slurm_job;      ///< job_<id> (Slurm before 26.05)
  std::optional<std::string> slurm_sluid;  ///< the job's SLUID (Slurm 26.05 and later name the cgroup by it)
  std::optional<std::uint32_t> slurm_uid;
  std::optional<std::uint32_t> session_uid;  ///< user-UID.slice
  /// The innermost systemd unit a job was started in (a `.service`, or a `.scope` made with systemd-run),
  /// without its suffix; never a login session (`session-N.scope`), `init.scope` or `user@UID.service`.
  std::optional<std::string> systemd_unit;
};

/// Parses the text of /proc/PID/cgroup (v1: many lines, v2: "0::/path").
CgroupFacts parse_cgroup(std::string_view cgroup_text);

/// Where owner lookups read from.
struct OwnerOptions {
  std::string proc_root = "/proc";
  std::string pod_log_root = "/var/log/pods";          ///< <namespace>_<pod>_<uid>/<container>/
  std::string container_log_root = "/var/log/containers";  ///< <pod>_<namespace>_<container>-<id>.log
};

/// Resolves PIDs to owners, caching by PID and process start time.
class OwnerResolver {
 public:
  explicit OwnerResolver(OwnerOptions options = {});
  /// The owner of `pid`; kind unresolved when /proc has no such process (e.g. another PID namespace).
  Owner resolve(std::uint32_t pid);
  /// Drops cache entries of PIDs not resolved since the previous call (call once per interval). A cached
  /// PID's start time is re-checked every few intervals (a reused PID gets a fresh lookup).
  void end_interval();
  const OwnerOptions& options() const { return options_; }
  /// A PID present in every interval has its start time re-read (PID reuse check) this often.
  static constexpr std::uint64_t kRecheckIntervals = 30;

 private:
  struct Pod {
    std::string pod_namespace, name;
  };
  std::optional<Pod> find_pod(const std::string& uid);
  std::optional<std::string> find_container_name(const Pod& pod, const std::string& container_id);
  std::string user_of(std::uint32_t uid);

  struct Cached {
    std::uint64_t start_ticks = 0;
    Owner owner;
    bool seen = true;
    std::uint64_t checked_interval = 0;
  };
  std::uint64_t interval_ = 0;
  OwnerOptions options_;
  ProcReader proc_;
  std::map<std::uint32_t, Cached> cache_;
  std::map<std::uint32_t, std::string> users_;
};

/// How this node's Slurm jobs are recognised (`doctor`).
struct SlurmAttribution {
  enum class Method { cgroup, environment, unavailable, none };
  Method method = Method::none;
  std::string conf_path;                  ///< the slurm.conf read ("" when none was found)
  std::optional<std::string> proctrack;   ///< its ProctrackType (nullopt: not set, Slurm's default proctrack/cgroup)
  std::string detail;                     ///< one sentence for people
};
/// "cgroup", "environment", "unavailable", "none".
const char* to_string(SlurmAttribution::Method method);
/// The value of `key` (case-insensitive) in slurm.conf text, comments stripped; nullopt when absent.
std::optional<std::string> slurm_conf_value(std::string_view conf_text, std::string_view key);
/// Decides the method from slurm.conf at `conf_path` (unreadable or missing: not a Slurm node) and whether
/// the reader runs as root: proctrack/cgroup puts jobs in cgroups gpumeter parses; any other proctrack
/// leaves only SLURM_JOB_ID in each job's environment, readable by root alone.
SlurmAttribution slurm_attribution(const std::string& conf_path, bool is_root);

/// The job name of a process group from its leader's arguments: the program's base name and its first
/// positional argument's base name ("python3 train.py"), or the program alone; arguments starting with '-',
/// holding '=', '@' or ':' or other characters than letters, digits and `._-` are never shown.
std::string job_command(const std::vector<std::string>& leader_args);

/// Start time (clock ticks since boot, field 22 of /proc/PID/stat) from the stat text; nullopt if malformed.
std::optional<std::uint64_t> stat_start_ticks(std::string_view stat_text);

}  // namespace gm::sys
