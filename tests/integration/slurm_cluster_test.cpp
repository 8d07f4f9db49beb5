// gpumeter under a real one-node Slurm 22.05 cluster (slurm_fixture.h): two GPUs as gres backed by the fake
// NVML library, whose process lists name the real job processes by `comm`. The job script execs a program
// named after the GPU Slurm gave it (CUDA_VISIBLE_DEVICES), so the fake GPU shows the job where Slurm put it.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <regex>

#include "integration/slurm_fixture.h"

namespace gm::test {
namespace {

/// A copy of /bin/sleep under `dir`/bin named `name` (its processes have comm == name).
std::string sleeper(const std::string& dir, const std::string& name) {
  std::filesystem::create_directories(dir + "/bin");
  const std::string p = dir + "/bin/" + name;
  std::filesystem::copy_file("/bin/sleep", p, std::filesystem::copy_options::overwrite_existing);
  chmod(p.c_str(), 0755);
  return p;
}

/// Micro-dollars from an exposition value (the agent prints exact decimals of integer micro-dollars).
long long micros(double usd) {
  return std::llround(usd * 1e6);
}

/// Σ of gpumeter_owner_cost_usd_total on `gpu` whose line contains `match`, in micro-dollars.
long long owner_cost(const std::string& text, const std::string& gpu, const std::string& match = "") {
  long long sum = 0;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("gpumeter_owner_cost_usd_total{gpu=\"" + gpu + "\"", 0) != 0) continue;
    if (!match.empty() && line.find(match) == std::string::npos) continue;
    sum += micros(std::stod(line.substr(line.rfind(' ') + 1)));
  }
  return sum;
}

class SlurmClusterSlurmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = slurm_unavailable(); !why.empty()) GTEST_SKIP() << why;
    // Installed by scripts/setup.sh: missing is a broken set-up, not a reason to skip.
    ASSERT_EQ(slurm_missing(), "");
    GM_ASSERT_BUILT();
    prefix_ = "gm" + std::to_string(getpid());
  }
  // Two H100s; GPU 0 is shared by whatever job Slurm puts there and a process outside Slurm.
  std::string scenario() const {
    return R"({"driver_version": "580.95.05", "devices": [
      {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-slurm-0", "pci_bus_id": "00000000:18:00.0",
       "memory_total_mib": 81559, "power_limit_w": 700, "energy_counter": true,
       "timeline": [{"t": 0, "util": 80, "mem_used_mib": 30000, "power_w": 500, "temp_c": 60, "processes": [
          {"comm": ")" +
           prefix_ + R"(g0", "mem_mib": 20000, "sm_util": 60},
          {"comm": ")" +
           prefix_ + R"(share", "mem_mib": 10000, "sm_util": 40}]}]},
      {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-slurm-1", "pci_bus_id": "00000000:19:00.0",
       "memory_total_mib": 81559, "power_limit_w": 700, "energy_counter": true,
       "timeline": [{"t": 0, "util": 50, "mem_used_mib": 20000, "power_w": 300, "temp_c": 50, "processes": [
          {"comm": ")" +
           prefix_ + R"(g1", "mem_mib": 20000, "sm_util": 50}]}]}]})";
  }
  /// A job on one GPU that runs `seconds` as the program named after its GPU; prints its GPU variables.
  std::string gpu_job(SlurmCluster& c, const std::string& seconds,
                      const std::vector<std::string>& extra = {}) {
    const std::string bin = dir_.path() + "/bin/" + prefix_;
    std::vector<std::string> args{"--gres=gpu:1", "-o", dir_.path() + "/job-%j.out"};
    args.insert(args.end(), extra.begin(), extra.end());
    args.push_back(
        "--wrap=echo CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES SLURM_JOB_GPUS=$SLURM_JOB_GPUS; exec " + bin +
        "g$CUDA_VISIBLE_DEVICES " + seconds);
    std::string err;
    const std::string id = c.sbatch(args, &err);
    EXPECT_FALSE(id.empty()) << err;
    return id;
  }
  std::string job_gpu(const std::string& job) {
    const std::string out = read_file(dir_.path() + "/job-" + job + ".out");
    std::smatch m;
    if (std::regex_search(out, m, std::regex("CUDA_VISIBLE_DEVICES=(\\d+) SLURM_JOB_GPUS=(\\d+)")))
      return m[1];
    return "";
  }
  TempDir dir_;
  std::string prefix_;
};

TEST_F(SlurmClusterSlurmTest, TwoJobsGetOneGpuEachFromGres) {
  SlurmCluster cluster(dir_.path() + "/cluster");
  ASSERT_TRUE(cluster.ok()) << cluster.error();
  sleeper(dir_.path(), prefix_ + "g0");
  sleeper(dir_.path(), prefix_ + "g1");
  const std::string a = gpu_job(cluster, "1"), b = gpu_job(cluster, "1");
  ASSERT_TRUE(cluster.wait_job(a, "COMPLETED")) << cluster.job_state(a) << cluster.logs();
  ASSERT_TRUE(cluster.wait_job(b, "COMPLETED")) << cluster.job_state(b) << cluster.logs();
  const std::string ga = job_gpu(a), gb = job_gpu(b);
  EXPECT_TRUE(ga == "0" || ga == "1") << read_file(dir_.path() + "/job-" + a + ".out");
  EXPECT_TRUE(gb == "0" || gb == "1") << read_file(dir_.path() + "/job-" + b + ".out");
  EXPECT_NE(ga, gb) << "two one-GPU jobs at once must get different GPUs";
}

// Per-job costs from the agent's exposition: two real jobs on the two fake GPUs, one GPU shared with a
// process outside Slurm. On every device Σ owners + unallocated = device cost, in exact micro-dollars.
TEST_F(SlurmClusterSlurmTest, AgentChargesEachJobOnItsGpuAndSumsExactly) {
  SlurmCluster cluster(dir_.path() + "/cluster");
  ASSERT_TRUE(cluster.ok()) << cluster.error();
  sleeper(dir_.path(), prefix_ + "g0");
  sleeper(dir_.path(), prefix_ + "g1");
  const std::string share = sleeper(dir_.path(), prefix_ + "share");
  const std::string scen = dir_.write("scenario.json", scenario());
  int port = 0;
  auto agent = start_agent(scen, dir_.path(), {"--price", "3.6", "--interval", "200ms"}, port);
  ASSERT_GT(port, 0) << agent->stderr_text();
  Background outsider({share, "60"}, {{"SLURM_JOB_ID", "\x01unset"}}, dir_.path(), "outsider");
  const std::string a = gpu_job(cluster, "3"), b = gpu_job(cluster, "3");
  ASSERT_TRUE(cluster.wait_job(a, "COMPLETED", 40)) << cluster.job_state(a) << cluster.logs();
  ASSERT_TRUE(cluster.wait_job(b, "COMPLETED", 40)) << cluster.job_state(b) << cluster.logs();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const CmdResult m = curl("http://127.0.0.1:" + std::to_string(port) + "/metrics");
  ASSERT_EQ(m.exit_code, 0) << m.err;
  const std::string& text = m.out;
  for (const std::string& job : {a, b}) {
    const std::string gpu = job_gpu(job);
    ASSERT_FALSE(gpu.empty()) << read_file(dir_.path() + "/job-" + job + ".out");
    const std::string other = gpu == "0" ? "1" : "0";
    const std::string labels =
        "kind=\"slurm_job\",owner=\"" + job + "\",slurm_job=\"" + job + "\",user=\"root\"";
    EXPECT_GT(owner_cost(text, gpu, labels), 0) << "job " << job << " on GPU " << gpu << "\n" << text;
    EXPECT_EQ(owner_cost(text, other, labels), 0) << "job " << job << " charged on the GPU it was not given";
  }
  // A process outside Slurm is owned by its job, its process group (issue 37: not by its name alone).
  EXPECT_GT(owner_cost(text, "0",
                       "kind=\"process\",owner=\"" + prefix_ + "share 60 (pgid " +
                           std::to_string(outsider.pid()) + ")\""),
            0)
      << text;
  for (const std::string gpu : {"0", "1"}) {
    const long long device = micros(metric(text, "gpumeter_gpu_cost_usd_total{gpu=\"" + gpu + "\""));
    const long long unalloc =
        micros(metric(text, "gpumeter_gpu_unallocated_cost_usd_total{gpu=\"" + gpu + "\""));
    EXPECT_GT(device, 0);
    // GPU 1 had no process before and after its job; GPU 0 always had the process outside Slurm.
    if (gpu == "1") {
      EXPECT_GT(unalloc, 0) << "GPU 1 was metered before and after its job";
    }
    EXPECT_EQ(owner_cost(text, gpu) + unalloc, device) << "gpu " << gpu;
  }
  EXPECT_EQ(agent->terminate(), 0);
}

// deploy/slurm's prolog and epilog installed as Prolog=/Epilog= (through a wrapper that sets their
// settings, as /etc/default/gpumeter-slurm would), with accounting (slurmdbd on a private MariaDB): the job's
// cost lands in its accounting record's AdminComment (`sacct`), and a job that never touches its GPU is
// charged that GPU's price for its duration as unused-GPU waste. Slurm 22.05 refuses `scontrol update` of a
// finished job (the Epilog runs after the job finished), which the epilog logs before using sacctmgr.
TEST_F(SlurmClusterSlurmTest, EpilogWritesTheJobCostIntoAdminComment) {
  ASSERT_EQ(slurm_accounting_missing(), "");
  sleeper(dir_.path(), prefix_ + "g0");
  sleeper(dir_.path(), prefix_ + "g1");
  const std::string scen = dir_.write("scenario.json", scenario());
  int port = 0;
  auto agent = start_agent(scen, dir_.path(), {"--price", "3.6", "--interval", "200ms"}, port);
  ASSERT_GT(port, 0) << agent->stderr_text();
  const std::string ledger = dir_.path() + "/node-ledger.db";
  std::string settings = "export GPUMETER_URL=http://127.0.0.1:" + std::to_string(port) +
                         " GPUMETER_SLURM_DIR=" + dir_.path() + "/slurm GPUMETER_SLURM_LOG=" + dir_.path() +
                         "/jobs.log GPUMETER_BIN=" + gpumeter_binary() + " GPUMETER_LEDGER=" + ledger +
                         " GPUMETER_TIMEOUT_S=10\n";  // a loaded 2-core machine: slurmdbd may take over 3 s
  for (const char* name : {"prolog", "epilog"}) {
    const std::string p =
        dir_.write(std::string(name) + ".sh", "#!/bin/sh\n" + settings + "exec " + source_dir() +
                                                  "/deploy/slurm/gpumeter-" + name + ".sh\n");
    chmod(p.c_str(), 0755);
  }
  SlurmCluster::Options o;
  o.prolog = dir_.path() + "/prolog.sh";
  o.epilog = dir_.path() + "/epilog.sh";
  o.accounting = true;
  SlurmCluster cluster(dir_.path() + "/cluster", o);
  ASSERT_TRUE(cluster.ok()) << cluster.error();
  const std::string busy = gpu_job(cluster, "3", {"-A", "physics"});
  std::string err;
  const std::string idle = cluster.sbatch(
      {"--gres=gpu:1", "-J", "idle-job", "-o", dir_.path() + "/idle.out", "--wrap=sleep 3"}, &err);
  ASSERT_FALSE(idle.empty()) << err;
  auto admin_comment = [&](const std::string& job) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < end) {
      const std::string out =
          cluster.slurm({"sacct", "-n", "-X", "-P", "-j", job, "-o", "JobID,User,Account,State,AdminComment"})
              .out;
      if (out.find("gpumeter ") != std::string::npos) return out.substr(0, out.find('\n'));
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return std::string();
  };
  const std::string busy_comment = admin_comment(busy), idle_comment = admin_comment(idle);
  ASSERT_FALSE(busy_comment.empty())
      << cluster.slurm({"sacct", "-j", busy, "-o", "JobID,State,AdminComment%80"}).out
      << read_file(dir_.path() + "/jobs.log") << cluster.logs();
  ASSERT_FALSE(idle_comment.empty()) << read_file(dir_.path() + "/jobs.log");
  EXPECT_EQ(busy_comment.rfind(busy + "|root|physics|COMPLETED|gpumeter ", 0), 0u) << busy_comment;
  std::smatch m;
  const std::regex re(
      R"(gpumeter cost_usd=([0-9.]+) idle_cost_usd=([0-9.]+) unused_gpu_cost_usd=([0-9.]+) energy_j=(\S+))");
  ASSERT_TRUE(std::regex_search(busy_comment, m, re)) << busy_comment;
  // About 3 s on its GPU at 3.6 $/h (0.001 $/s); 60 % (GPU 0) or 100 % (GPU 1) of it; idle part 20 % or 50 %.
  EXPECT_GT(std::stod(m[1]), 0.001) << busy_comment;
  EXPECT_LT(std::stod(m[1]), 0.006) << busy_comment;
  EXPECT_GT(std::stod(m[2]), 0) << busy_comment;
  EXPECT_LT(std::stod(m[2]), std::stod(m[1])) << busy_comment;
  EXPECT_EQ(std::stod(m[3]), 0) << busy_comment;
  EXPECT_GT(std::stod(m[4]), 0) << busy_comment;
  ASSERT_TRUE(std::regex_search(idle_comment, m, re)) << idle_comment;
  EXPECT_EQ(std::stod(m[1]), 0) << idle_comment;
  EXPECT_GE(std::stod(m[3]), 0.002) << idle_comment;  // its GPU's price for ≥ 2 whole seconds
  EXPECT_LT(std::stod(m[3]), 0.01) << idle_comment;
  const std::string log = read_file(dir_.path() + "/jobs.log");
  EXPECT_NE(log.find("job=" + busy + " user=root account=physics partition=gpu"), std::string::npos) << log;
  EXPECT_EQ(log.find("AdminComment not written"), std::string::npos) << log;
  EXPECT_EQ(log.find("not recorded"), std::string::npos) << log;
  // Both jobs are runs in the node's ledger, with Slurm's labels; the report groups them by account. The
  // epilog records the run after it writes the AdminComment, so the records (and, before the first, the
  // ledger file itself: exit 4, "no ledger") may still be on their way.
  CmdResult runs;
  nlohmann::json rj = nlohmann::json::array();
  for (const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);;) {
    runs = run_gpumeter({"runs", "--json", "--ledger", ledger});
    const bool no_ledger_yet = runs.exit_code == 4 && runs.err.find("no ledger") != std::string::npos;
    if (!no_ledger_yet) {
      ASSERT_EQ(runs.exit_code, 0) << runs.err;
      rj = nlohmann::json::parse(runs.out);
    }
    if (rj.size() >= 2u || std::chrono::steady_clock::now() > end) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  ASSERT_EQ(rj.size(), 2u) << runs.out;
  for (const auto& r : rj) {
    EXPECT_EQ(r["status"], "succeeded") << r.dump();
    EXPECT_EQ(r["user"], "root");
    EXPECT_EQ(r["labels"]["slurm.partition"], "gpu");
    EXPECT_EQ(r["gpus_allocated"].size(), 1u) << r.dump();
    if (r["labels"]["slurm.job"] == busy) {
      EXPECT_EQ(r["labels"]["slurm.account"], "physics");
      EXPECT_EQ(r["gpus_used"], r["gpus_allocated"]) << r.dump();
      EXPECT_EQ(r["command"], "slurm job " + busy + " (wrap)");
    } else {
      EXPECT_EQ(r["labels"]["slurm.job"], idle);
      EXPECT_EQ(r["gpus_used"].size(), 0u) << r.dump();
      EXPECT_EQ(r["command"], "slurm job " + idle + " (idle-job)");
    }
  }
  const CmdResult rep =
      run_gpumeter({"report", "--since", "1d", "--by", "slurm-account", "--json", "--ledger", ledger});
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  const auto repj = nlohmann::json::parse(rep.out);
  bool physics = false;
  for (const auto& g : repj["groups"])
    if (g["key"] == "physics") {
      physics = true;
      EXPECT_EQ(g["runs"], 1);
      EXPECT_GT(g["cost_usd"].get<double>(), 0.001);
    }
  EXPECT_TRUE(physics) << rep.out;
  EXPECT_GT(repj["total"]["unused_gpu_cost_usd"].get<double>(), 0.001) << rep.out;
  EXPECT_EQ(agent->terminate(), 0);
}

// proctrack/linuxproc leaves no job cgroup: the agent (root) finds the job through SLURM_JOB_ID and
// SLURM_JOB_ACCOUNT in the process's environment, and `doctor` says so.
TEST_F(SlurmClusterSlurmTest, EnvironmentMethodUnderLinuxproc) {
  SlurmCluster::Options o;
  o.proctrack = SlurmProctrack::linuxproc;
  SlurmCluster cluster(dir_.path() + "/cluster", o);
  ASSERT_TRUE(cluster.ok()) << cluster.error();
  EXPECT_FALSE(cluster.cgroup_tracking());
  sleeper(dir_.path(), prefix_ + "g0");
  sleeper(dir_.path(), prefix_ + "g1");
  const std::string scen = dir_.write("scenario.json", scenario());
  auto denv = fake_env(scen, dir_.path());
  denv["SLURM_CONF"] = cluster.conf();
  const CmdResult doctor = run_gpumeter({"doctor"}, denv);
  EXPECT_NE(doctor.out.find(
                "Slurm jobs       environment: SLURM_JOB_ID from /proc/PID/environ (proctrack/linuxproc"),
            std::string::npos)
      << doctor.out << doctor.err;
  int port = 0;
  auto agent = start_agent(scen, dir_.path(), {"--price", "3.6", "--interval", "200ms"}, port);
  ASSERT_GT(port, 0) << agent->stderr_text();
  const std::string job = gpu_job(cluster, "2", {"-A", "physics"});
  ASSERT_TRUE(cluster.wait_job(job, "COMPLETED", 30)) << cluster.job_state(job) << cluster.logs();
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  const std::string text = curl("http://127.0.0.1:" + std::to_string(port) + "/metrics").out;
  const std::string gpu = job_gpu(job);
  ASSERT_FALSE(gpu.empty());
  EXPECT_GT(owner_cost(text, gpu,
                       "kind=\"slurm_job\",owner=\"" + job + "\",slurm_job=\"" + job +
                           "\",account=\"physics\",user=\"root\""),
            0)
      << text;
  EXPECT_EQ(agent->terminate(), 0);
}

// With proctrack/cgroup (where the cgroup v1 freezer is usable) `doctor` names the cgroup method, and the job
// processes really sit in Slurm's cgroup.
TEST_F(SlurmClusterSlurmTest, DoctorNamesTheCgroupMethod) {
  SlurmCluster cluster(dir_.path() + "/cluster");
  ASSERT_TRUE(cluster.ok()) << cluster.error();
  const std::string scen = dir_.write("scenario.json", scenario());
  auto denv = fake_env(scen, dir_.path());
  denv["SLURM_CONF"] = cluster.conf();
  const CmdResult doctor = run_gpumeter({"doctor"}, denv);
  const std::string expected = cluster.cgroup_tracking()
                                   ? "Slurm jobs       cgroup: cgroup paths (proctrack/cgroup)"
                                   : "Slurm jobs       environment:";
  EXPECT_NE(doctor.out.find(expected), std::string::npos) << doctor.out;
  if (!cluster.cgroup_tracking()) return;  // no cgroup v1 freezer here: the environment test covers this node
  std::string err;
  const std::string job =
      cluster.sbatch({"-o", dir_.path() + "/cg.out", "--wrap=cat /proc/self/cgroup"}, &err);
  ASSERT_FALSE(job.empty()) << err;
  ASSERT_TRUE(cluster.wait_job(job, "COMPLETED")) << cluster.logs();
  EXPECT_NE(read_file(dir_.path() + "/cg.out")
                .find("/slurm_" + cluster.node() + "/uid_0/job_" + job + "/step_batch"),
            std::string::npos)
      << read_file(dir_.path() + "/cg.out");
}

// `gpumeter run` as the job of `sbatch --wrap`, cancelled with scancel mid-run: the ledger keeps the run
// as interrupted, with the seconds it committed (1 s samples), the GPU Slurm allocated and the signal's exit
// status.
TEST_F(SlurmClusterSlurmTest, ScancelledGpumeterRunKeepsItsCommittedSeconds) {
  SlurmCluster cluster(dir_.path() + "/cluster");
  ASSERT_TRUE(cluster.ok()) << cluster.error();
  sleeper(dir_.path(), prefix_ + "g0");
  sleeper(dir_.path(), prefix_ + "g1");
  const std::string scen = dir_.write("scenario.json", scenario());
  const auto env = fake_env(scen, dir_.path());
  const std::string wrap = "--wrap=exec " + gpumeter_binary() + " run --price 3.6 -- " + dir_.path() +
                           "/bin/" + prefix_ + "g$CUDA_VISIBLE_DEVICES 120";
  std::string err;
  const std::string job = cluster.sbatch({"--gres=gpu:1", "-o", dir_.path() + "/run.out", wrap}, &err, env);
  ASSERT_FALSE(job.empty()) << err;
  ASSERT_TRUE(cluster.wait_job(job, "RUNNING", 20)) << cluster.logs();
  std::this_thread::sleep_for(std::chrono::milliseconds(3500));
  ASSERT_EQ(cluster.slurm({"scancel", job}).exit_code, 0);
  ASSERT_TRUE(cluster.wait_job(job, "CANCELLED", 20)) << cluster.job_state(job);
  ASSERT_TRUE(cluster.wait_queue_empty(20));
  const CmdResult runs = run_gpumeter({"runs", "--json"}, env);
  ASSERT_EQ(runs.exit_code, 0) << runs.err << read_file(dir_.path() + "/run.out");
  const auto j = nlohmann::json::parse(runs.out);
  ASSERT_EQ(j.size(), 1u) << runs.out;
  const auto& run = j[0];
  EXPECT_GE(run["wall_s"].get<double>(), 2.0) << run.dump();
  EXPECT_GT(run["cost_usd"].get<double>(), 0) << run.dump();
  // scancel's SIGTERM reached the job through gpumeter (128 + 15): the run was interrupted, not finished.
  EXPECT_EQ(run["exit_code"], 143) << run.dump();
  EXPECT_EQ(run["status"], "interrupted") << run.dump();
  // Slurm's CUDA_VISIBLE_DEVICES is the run's allocation: one GPU, the one Slurm gave the job.
  ASSERT_EQ(run["gpus_allocated"].size(), 1u) << run.dump();
  EXPECT_TRUE(run["gpus_allocated"][0] == "GPU-slurm-0" || run["gpus_allocated"][0] == "GPU-slurm-1")
      << run.dump();
}

}  // namespace
}  // namespace gm::test
