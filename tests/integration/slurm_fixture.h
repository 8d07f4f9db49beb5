#pragma once
// A one-node Slurm cluster started by a test: munged (own key and socket), slurmctld and slurmd bound to
// loopback on free ports, two GPUs as gres backed by placeholder device nodes, all files in a temporary
// directory. Teardown cancels the cluster's jobs and ends only the daemons this fixture started.
//
// Process tracking: proctrack/cgroup with the cgroup/v1 plugin when a writable cgroup v1 freezer hierarchy
// is mounted (jobs then live in /slurm_<node>/uid_U/job_J/step_S, the layout gpumeter reads on most
// clusters); otherwise proctrack/linuxproc (cgroup v2 without systemd: Slurm 22.05's cgroup/v2 plugin
// needs systemd to create slurmstepd.scope), where gpumeter falls back to SLURM_JOB_ID in the process
// environment. task/none: task/cgroup would constrain devices, and the placeholder device nodes are not GPUs.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "integration/agent_fixture.h"
#include "support/support.h"

namespace gm::test {

/// How the cluster tracks job processes.
enum class SlurmProctrack { automatic, linuxproc };

/// Why the Slurm tests cannot run here ("" when they can): slurmd runs jobs as their users, so it needs root.
inline std::string slurm_unavailable() {
  if (geteuid() != 0) return "Slurm tests need root (slurmd runs jobs as their users)";
  return "";
}

/// The Slurm and munge programs scripts/setup.sh installs that are missing ("" when none is).
inline std::string slurm_missing() {
  std::string missing;
  for (const char* b : {"/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/sbin/munged", "/usr/bin/sbatch",
                        "/usr/bin/sinfo", "/usr/bin/scontrol", "/usr/bin/squeue", "/usr/bin/scancel"})
    if (access(b, X_OK) != 0) missing += std::string(missing.empty() ? "" : ", ") + b;
  return missing.empty() ? "" : missing + " not installed (scripts/setup.sh installs it)";
}

/// A free TCP port on 127.0.0.1 (bound and released: another process may take it, rarely).
inline int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

/// True when a writable cgroup v1 freezer hierarchy is mounted (proctrack/cgroup works with cgroup/v1).
inline bool cgroup_v1_freezer_usable() {
  const std::string mounts = read_file("/proc/self/mounts");
  std::istringstream in(mounts);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string dev, dir, type, opts;
    f >> dev >> dir >> type >> opts;
    if (type == "cgroup" && dir == "/sys/fs/cgroup/freezer" && (opts.find("freezer") != std::string::npos))
      return access(dir.c_str(), W_OK) == 0;
  }
  return false;
}

/// What the cluster runs.
struct SlurmClusterOptions {
  SlurmProctrack proctrack = SlurmProctrack::automatic;
  std::string epilog;  ///< Epilog= script ("" = none)
  std::string prolog;  ///< Prolog= script ("" = none)
  /// Accounting: a private MariaDB on loopback, slurmdbd, account "physics" for root (sacct, sacctmgr).
  bool accounting = false;
};

/// The accounting programs (slurmdbd, MariaDB) scripts/setup.sh installs that are missing ("" when none is).
inline std::string slurm_accounting_missing() {
  std::string missing;
  for (const char* b : {"/usr/sbin/slurmdbd", "/usr/sbin/mariadbd", "/usr/bin/mariadb-install-db",
                        "/usr/bin/mariadb", "/usr/bin/sacctmgr", "/usr/bin/sacct"})
    if (access(b, X_OK) != 0) missing += std::string(missing.empty() ? "" : ", ") + b;
  return missing.empty() ? "" : missing + " not installed (scripts/setup.sh installs it)";
}

/// The cluster. Construct, then check ok(); error() says what failed (with the daemons' logs).
class SlurmCluster {
 public:
  using Options = SlurmClusterOptions;
  explicit SlurmCluster(const std::string& dir, Options options = {}) : dir_(dir) {
    node_ = "gm" + std::to_string(getpid()) + "n" + std::to_string(counter()++);
    cgroup_ = options.proctrack == SlurmProctrack::automatic && cgroup_v1_freezer_usable();
    error_ = start(options);
  }
  ~SlurmCluster() { stop(); }
  SlurmCluster(const SlurmCluster&) = delete;
  SlurmCluster& operator=(const SlurmCluster&) = delete;

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  /// The node name (unique per cluster, so concurrent clusters never share cgroups).
  const std::string& node() const { return node_; }
  /// True when jobs are tracked in cgroups (proctrack/cgroup), false for proctrack/linuxproc.
  bool cgroup_tracking() const { return cgroup_; }
  const std::string& dir() const { return dir_; }
  std::string conf() const { return dir_ + "/slurm.conf"; }
  /// Environment for Slurm's commands (and for gpumeter commands that talk to this cluster).
  std::map<std::string, std::string> env() const {
    return {{"SLURM_CONF", conf()}, {"SLURM_JOB_ID", "\x01unset"}, {"SLURM_JOBID", "\x01unset"}};
  }
  /// Runs a Slurm command (argv[0] is the program name) against this cluster.
  CmdResult slurm(std::vector<std::string> argv, double timeout_s = 20,
                  const std::map<std::string, std::string>& extra_env = {}) const {
    argv[0] = (argv[0] == "scontrol" || argv[0] == "sinfo" || argv[0] == "squeue" || argv[0] == "scancel" ||
               argv[0] == "sbatch" || argv[0] == "sacct" || argv[0] == "sacctmgr")
                  ? "/usr/bin/" + argv[0]
                  : argv[0];
    auto e = env();
    for (const auto& [k, v] : extra_env) e[k] = v;
    return run_command(argv, e, std::nullopt, timeout_s);
  }
  /// Submits a batch job (which inherits `extra_env`, as sbatch exports the submitter's environment);
  /// returns its id ("" on failure, with the reason in `err`).
  std::string sbatch(const std::vector<std::string>& args, std::string* err = nullptr,
                     const std::map<std::string, std::string>& extra_env = {}) const {
    std::vector<std::string> argv{"sbatch", "--parsable"};
    argv.insert(argv.end(), args.begin(), args.end());
    const CmdResult r = slurm(argv, 20, extra_env);
    std::string id = r.out.substr(0, r.out.find_first_of(";\n"));
    if (r.exit_code != 0 || id.empty()) {
      if (err) *err = r.out + r.err;
      return "";
    }
    return id;
  }
  /// The job's state (%T: PENDING, RUNNING, COMPLETED, CANCELLED, ...) from scontrol, "" when unknown.
  std::string job_state(const std::string& job) const {
    const CmdResult r = slurm({"scontrol", "show", "job", job});
    const auto p = r.out.find("JobState=");
    if (p == std::string::npos) return "";
    return r.out.substr(p + 9, r.out.find_first_of(" \n", p) - p - 9);
  }
  /// Waits until `job` reaches `state` (or any state not PENDING/RUNNING/COMPLETING when state is "").
  bool wait_job(const std::string& job, const std::string& state = "", double timeout_s = 30) const {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (std::chrono::steady_clock::now() < end) {
      const std::string s = job_state(job);
      if (state.empty()
              ? (!s.empty() && s != "PENDING" && s != "RUNNING" && s != "COMPLETING" && s != "CONFIGURING")
              : s == state)
        return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }
  /// Waits until the node has no job left (squeue empty).
  bool wait_queue_empty(double timeout_s = 30) const {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (std::chrono::steady_clock::now() < end) {
      const CmdResult r = slurm({"squeue", "-h", "-o", "%i"});
      if (r.exit_code == 0 && r.out.find_first_not_of(" \n") == std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }
  /// The daemons' logs, for failure messages.
  std::string logs() const {
    std::string s;
    for (const char* f :
         {"slurmctld.log", "slurmd.log", "munged.log", "slurmdbd.log", "slurmdbd.err", "mariadbd.err"}) {
      std::string t = read_file(dir_ + "/log/" + f);
      if (t.size() > 3000) t = t.substr(t.size() - 3000);
      s += std::string("--- ") + f + "\n" + t;
    }
    return s;
  }

  /// Cancels every job, waits for them to leave, then ends slurmd, slurmctld and munged (SIGTERM, then
  /// SIGKILL) and removes the node's cgroups. Idempotent.
  void stop() {
    if (stopped_) return;
    stopped_ = true;
    if (slurmctld_ && slurmd_) {
      (void)slurm({"scancel", "--full", "--quiet", "-w", node_}, 10);
      (void)wait_queue_empty(15);
    }
    for (auto* d : {&slurmd_, &slurmctld_, &slurmdbd_, &mariadbd_, &munged_}) {
      if (*d) (void)(*d)->terminate(10);
      d->reset();  // SIGKILLs the process group if still there
    }
    if (cgroup_) {
      // Empty cgroups the job steps left behind, deepest first (rmdir fails on a busy one: left as is).
      for (const char* controller : {"freezer", "cpuset", "memory", "devices"}) {
        const std::filesystem::path root = std::string("/sys/fs/cgroup/") + controller + "/slurm_" + node_;
        std::error_code ec;
        if (!std::filesystem::exists(root, ec)) continue;
        std::vector<std::filesystem::path> dirs;
        for (auto it = std::filesystem::recursive_directory_iterator(root, ec);
             !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec))
          if (it->is_directory(ec)) dirs.push_back(it->path());
        std::sort(dirs.begin(), dirs.end(),
                  [](const auto& a, const auto& b) { return a.string().size() > b.string().size(); });
        for (const auto& d : dirs) rmdir(d.c_str());
        rmdir(root.c_str());
      }
    }
  }

 private:
  static int& counter() {
    static int n = 0;
    return n;
  }

  std::string start(const Options& o) {
    namespace fs = std::filesystem;
    for (const char* d : {"state", "spool", "log", "dev", "munge"}) fs::create_directories(dir_ + "/" + d);
    chmod((dir_ + "/munge").c_str(), 0755);
    chmod(dir_.c_str(), 0755);
    // munge key: 1 KiB of random bytes, 0400.
    {
      std::random_device rd;
      std::string key(1024, '\0');
      for (char& c : key) c = static_cast<char>(rd() & 0xff);
      const std::string kp = dir_ + "/munge/munge.key";
      std::ofstream(kp, std::ios::binary) << key;
      chmod(kp.c_str(), 0400);
    }
    // Two placeholder GPU device nodes (slurmd requires character devices); same numbers as /dev/null.
    for (int i = 0; i < 2; ++i) {
      const std::string p = dir_ + "/dev/gpu" + std::to_string(i);
      if (mknod(p.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0) return "mknod " + p + " failed";
    }
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    const int ctld_port = free_port(), slurmd_port = free_port();
    std::string conf = "# gpumeter test cluster\nClusterName=gmtest\n";
    conf += "SlurmctldHost=" + std::string(host) + "(127.0.0.1)\n";
    conf +=
        "SlurmctldPort=" + std::to_string(ctld_port) + "\nSlurmdPort=" + std::to_string(slurmd_port) + "\n";
    conf += "SlurmUser=root\nSlurmdUser=root\nAuthType=auth/munge\nCredType=cred/munge\n";
    conf += "AuthInfo=socket=" + dir_ + "/munge/munge.sock\n";
    conf += "StateSaveLocation=" + dir_ + "/state\nSlurmdSpoolDir=" + dir_ + "/spool\n";
    conf += "SlurmctldPidFile=" + dir_ + "/slurmctld.pid\nSlurmdPidFile=" + dir_ + "/slurmd.pid\n";
    conf += "SlurmctldLogFile=" + dir_ + "/log/slurmctld.log\nSlurmdLogFile=" + dir_ + "/log/slurmd.log\n";
    conf += std::string("ProctrackType=") + (cgroup_ ? "proctrack/cgroup" : "proctrack/linuxproc") + "\n";
    conf += "TaskPlugin=task/none\nJobAcctGatherType=jobacct_gather/none\n";
    const int dbd_port = o.accounting ? free_port() : 0;
    if (o.accounting)
      conf +=
          "AccountingStorageType=accounting_storage/"
          "slurmdbd\nAccountingStorageHost=127.0.0.1\nAccountingStoragePort=" +
          std::to_string(dbd_port) + "\nAccountingStoragePass=" + dir_ +
          "/munge/munge.sock\n";  // slurmdbd's munge
    else
      conf += "AccountingStorageType=accounting_storage/none\n";
    conf += "JobCompType=jobcomp/none\nSchedulerType=sched/backfill\nSelectType=select/cons_tres\n";
    conf +=
        "SelectTypeParameters=CR_Core\nGresTypes=gpu\nReturnToService=2\nSlurmdParameters=config_overrides\n";
    conf +=
        "MpiDefault=none\nInactiveLimit=0\nMinJobAge=300\nKillWait=3\nSchedulerParameters=sched_interval=1\n";
    if (!o.prolog.empty()) conf += "Prolog=" + o.prolog + "\n";
    if (!o.epilog.empty()) conf += "Epilog=" + o.epilog + "\n";
    conf += "NodeName=" + node_ + " NodeHostname=" + host +
            " NodeAddr=127.0.0.1 CPUs=4 RealMemory=1000 Gres=gpu:2 State=UNKNOWN\n";
    conf += "PartitionName=gpu Nodes=" + node_ + " Default=YES MaxTime=INFINITE State=UP\n";
    write_text(conf_path(), conf);
    write_text(dir_ + "/gres.conf", "NodeName=" + node_ + " Name=gpu File=" + dir_ + "/dev/gpu[0-1]\n");
    write_text(dir_ + "/cgroup.conf", cgroup_ ? "CgroupPlugin=cgroup/v1\nCgroupMountpoint=/sys/fs/cgroup\n"
                                              : "CgroupPlugin=autodetect\n");

    const std::map<std::string, std::string> env{{"SLURM_CONF", conf_path()}};
    munged_ = std::make_unique<Background>(
        std::vector<std::string>{
            "/usr/sbin/munged", "-F", "-f", "--socket=" + dir_ + "/munge/munge.sock",
            "--key-file=" + dir_ + "/munge/munge.key", "--log-file=" + dir_ + "/log/munged.log",
            "--pid-file=" + dir_ + "/munge/munged.pid", "--seed-file=" + dir_ + "/munge/munged.seed"},
        env, dir_ + "/log", "munged");
    if (!wait_for([&] { return fs::exists(dir_ + "/munge/munge.sock"); }, 10))
      return "munged did not create its socket\n" + logs();
    if (o.accounting) {
      if (std::string e = start_accounting(dbd_port); !e.empty()) return e;
    }
    slurmctld_ = std::make_unique<Background>(
        std::vector<std::string>{"/usr/sbin/slurmctld", "-D", "-i", "-f", conf_path()}, env, dir_ + "/log",
        "slurmctld");
    if (!wait_for([&] { return slurm({"scontrol", "ping"}, 5).out.find("is UP") != std::string::npos; }, 20))
      return "slurmctld did not come up\n" + logs();
    slurmd_ = std::make_unique<Background>(
        std::vector<std::string>{"/usr/sbin/slurmd", "-D", "-N", node_, "-f", conf_path()}, env,
        dir_ + "/log", "slurmd");
    if (!wait_for([&] { return slurm({"sinfo", "-h", "-N", "-o", "%t"}, 5).out.rfind("idle", 0) == 0; }, 30))
      return "node " + node_ + " did not become idle\n" + slurm({"sinfo", "-N"}).out + logs();
    return "";
  }
  std::string conf_path() const { return dir_ + "/slurm.conf"; }

  // MariaDB in dir_/db on a free loopback port (its own data directory, user slurm with a password), then
  // slurmdbd (slurmdbd.conf next to slurm.conf, mode 0600), the cluster and the account "physics".
  std::string start_accounting(int dbd_port) {
    namespace fs = std::filesystem;
    const std::string db = dir_ + "/db";
    fs::create_directories(db + "/data");
    const CmdResult inst =
        run_command({"/usr/bin/mariadb-install-db", "--no-defaults", "--datadir=" + db + "/data",
                     "--user=root", "--auth-root-authentication-method=normal", "--skip-test-db"},
                    {}, std::nullopt, 60);
    if (inst.exit_code != 0) return "mariadb-install-db failed: " + inst.out + inst.err;
    write_text(db + "/init.sql",
               "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'gmtest';\n"
               "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';\n");
    const int db_port = free_port();
    mariadbd_ = std::make_unique<Background>(
        std::vector<std::string>{"/usr/sbin/mariadbd", "--no-defaults", "--datadir=" + db + "/data",
                                 "--user=root", "--bind-address=127.0.0.1",
                                 "--port=" + std::to_string(db_port), "--socket=" + db + "/mysqld.sock",
                                 "--pid-file=" + db + "/mysqld.pid", "--init-file=" + db + "/init.sql",
                                 "--skip-log-bin", "--innodb-buffer-pool-size=32M"},
        std::map<std::string, std::string>{}, dir_ + "/log", "mariadbd");
    if (!wait_for(
            [&] {
              return run_command({"/usr/bin/mariadb", "--no-defaults", "-h", "127.0.0.1", "-P",
                                  std::to_string(db_port), "-u", "slurm", "-pgmtest", "-e", "select 1"},
                                 {}, std::nullopt, 5)
                         .exit_code == 0;
            },
            30))
      return "MariaDB did not come up\n" + logs();
    const std::string dbd_conf = dir_ + "/slurmdbd.conf";
    write_text(
        dbd_conf,
        "AuthType=auth/munge\nAuthInfo=socket=" + dir_ + "/munge/munge.sock\nDbdHost=localhost\n" +
            "DbdAddr=127.0.0.1\nDbdPort=" + std::to_string(dbd_port) + "\nSlurmUser=root\nLogFile=" + dir_ +
            "/log/slurmdbd.log\nPidFile=" + dir_ + "/slurmdbd.pid\n" +
            "StorageType=accounting_storage/mysql\nStorageHost=127.0.0.1\nStoragePort=" +
            std::to_string(db_port) + "\nStorageUser=slurm\nStoragePass=gmtest\nStorageLoc=slurm_acct_db\n");
    chmod(dbd_conf.c_str(), 0600);
    slurmdbd_ = std::make_unique<Background>(std::vector<std::string>{"/usr/sbin/slurmdbd", "-D"},
                                             std::map<std::string, std::string>{{"SLURM_CONF", conf_path()}},
                                             dir_ + "/log", "slurmdbd");
    CmdResult last;
    if (!wait_for(
            [&] {
              last = slurm({"sacctmgr", "-n", "list", "cluster"}, 5);
              return last.exit_code == 0;
            },
            30))
      return "slurmdbd did not come up: sacctmgr: " + last.out + last.err + "\n" + logs();
    for (std::vector<std::string> cmd :
         {std::vector<std::string>{"sacctmgr", "-i", "add", "cluster", "gmtest"},
          std::vector<std::string>{"sacctmgr", "-i", "add", "account", "physics"},
          std::vector<std::string>{"sacctmgr", "-i", "add", "user", "root", "account=physics"}}) {
      const CmdResult r = slurm(cmd, 15);
      if (r.exit_code != 0) return "sacctmgr " + cmd[2] + " " + cmd[3] + " failed: " + r.out + r.err;
    }
    return "";
  }
  template <typename F>
  bool wait_for(F f, double timeout_s) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (std::chrono::steady_clock::now() < end) {
      if (f()) return true;
      for (auto* d : {&munged_, &mariadbd_, &slurmdbd_, &slurmctld_, &slurmd_})
        if (*d && !(*d)->running()) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }

  std::string dir_;
  std::string node_;
  bool cgroup_ = false;
  std::string error_;
  bool stopped_ = false;
  std::unique_ptr<Background> munged_, mariadbd_, slurmdbd_, slurmctld_, slurmd_;
};

}  // namespace gm::test
