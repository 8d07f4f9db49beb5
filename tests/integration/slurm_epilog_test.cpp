// The Slurm prolog and epilog (deploy/slurm/) never fail or delay a job because of metering: a malformed
// SLURM_JOB_ID, an agent that is down or hangs, a node without scontrol. Each problem is logged.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <nlohmann/json.hpp>

#include "integration/agent_fixture.h"

namespace gm::test {
namespace {

class SlurmEpilogIntegrationTest : public ::testing::Test {
 protected:
  std::map<std::string, std::string> env(const std::string& job, const std::string& url) const {
    return {{"SLURM_JOB_ID", job},
            {"SLURM_JOB_USER", "alice"},
            {"SLURM_JOB_GPUS", "0"},
            {"GPUMETER_URL", url},
            {"GPUMETER_TIMEOUT_S", "2"},
            {"GPUMETER_SLURM_DIR", dir_.path() + "/state"},
            {"GPUMETER_SLURM_LOG", dir_.path() + "/jobs.log"}};
  }
  CmdResult script(const std::string& name, const std::map<std::string, std::string>& e) const {
    return run_command({source_dir() + "/deploy/slurm/gpumeter-" + name + ".sh"}, e, std::nullopt, 30);
  }
  TempDir dir_;
};

TEST_F(SlurmEpilogIntegrationTest, MalformedJobIdIsLoggedAndIgnored) {
  for (const std::string job : {"", "12;rm -rf /", "abc", "42 43", "$(id)"}) {
    for (const char* name : {"prolog", "epilog"}) {
      const CmdResult r = script(name, env(job, "http://127.0.0.1:9"));
      EXPECT_EQ(r.exit_code, 0) << name << " '" << job << "': " << r.err;
      EXPECT_LT(r.wall_s, 2) << name;
      EXPECT_NE(r.err.find("bad SLURM_JOB_ID"), std::string::npos) << name << ": " << r.err;
    }
  }
  const std::string log = read_file(dir_.path() + "/jobs.log");
  EXPECT_NE(log.find(R"(gpumeter epilog: bad SLURM_JOB_ID '12?rm?-rf??')"), std::string::npos) << log;
  EXPECT_EQ(log.find("$(id)"), std::string::npos) << "job ids are logged sanitised";
  EXPECT_EQ(log.find("cost_usd="), std::string::npos) << "nothing recorded for a bad job id";
}

TEST_F(SlurmEpilogIntegrationTest, UnreachableOrHungAgentDoesNotDelayTheJob) {
  // A port nobody listens on, and one that accepts connections but never answers.
  const int hung = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ASSERT_EQ(bind(hung, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(listen(hung, 16), 0);
  ASSERT_EQ(getsockname(hung, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const std::string hung_url = "http://127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  for (const std::string& url : {std::string("http://127.0.0.1:9"), hung_url}) {
    const CmdResult pro = script("prolog", env("77", url));
    EXPECT_EQ(pro.exit_code, 0) << pro.err;
    EXPECT_LT(pro.wall_s, 4) << url;
    const CmdResult epi = script("epilog", env("77", url));
    EXPECT_EQ(epi.exit_code, 0) << epi.err;
    EXPECT_LT(epi.wall_s, 4) << url << " (GPUMETER_TIMEOUT_S=2)";
    EXPECT_NE(epi.err.find("agent at " + url + " not reachable; job 77 not recorded"), std::string::npos)
        << epi.err;
  }
  close(hung);
  EXPECT_NE(read_file(dir_.path() + "/jobs.log").find("not reachable"), std::string::npos);
}

TEST_F(SlurmEpilogIntegrationTest, MissingScontrolIsLoggedAndTheJobStillRecorded) {
  // The real agent (fake NVML, one idle GPU), and a PATH with every tool the epilog uses except scontrol.
  GM_ASSERT_BUILT();
  const std::string scen =
      dir_.write("s.json", R"({"devices": [{"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-1",
    "memory_total_mib": 81559, "energy_counter": true, "timeline": [{"t": 0, "util": 0, "mem_used_mib": 100,
    "power_w": 100, "temp_c": 40, "processes": []}]}]})");
  int port = 0;
  auto agent = start_agent(scen, dir_.path(), {"--price", "36", "--interval", "100ms"}, port);
  ASSERT_GT(port, 0) << agent->stderr_text();
  const std::string bin = dir_.path() + "/bin";
  std::filesystem::create_directories(bin);
  for (const char* tool :
       {"sh", "curl", "awk", "date", "mkdir", "dirname", "tr", "cut", "rm", "hostname", "timeout", "cat"}) {
    const CmdResult w = run_command({"sh", "-c", std::string("command -v ") + tool});
    ASSERT_EQ(w.exit_code, 0) << tool;
    std::filesystem::create_symlink(w.out.substr(0, w.out.find('\n')), bin + "/" + tool);
  }
  auto e = env("78", "http://127.0.0.1:" + std::to_string(port));
  e["PATH"] = bin;
  ASSERT_EQ(script("prolog", e).exit_code, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  const CmdResult epi = script("epilog", e);
  EXPECT_EQ(epi.exit_code, 0) << epi.err;
  EXPECT_NE(epi.err.find("scontrol not found; job 78 cost not written to its AdminComment"),
            std::string::npos)
      << epi.err;
  // The job never ran a process on its GPU 0: the GPU's price for its duration is unused-GPU waste.
  const std::string log = read_file(dir_.path() + "/jobs.log");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      log, m, std::regex(R"(job=78 .* gpus=0 cost_usd=0 idle_cost_usd=0 unused_gpu_cost_usd=([0-9.]+))")))
      << log;
  EXPECT_GE(std::stod(m[1]), 0.01);  // 36 $/h = 0.01 $/s, at least one whole second
  EXPECT_EQ(agent->terminate(), 0);
}

TEST_F(SlurmEpilogIntegrationTest, RecordJobRejectsBadInputAndRecordsARun) {
  const std::string ledger = dir_.path() + "/ledger.db";
  const std::vector<std::string> base{"record-job",  "--ledger", ledger, "--name",
                                      "slurm job 7", "--user",   "alice"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  const CmdResult backwards = run_gpumeter(with({"--start-unix", "2000", "--end-unix", "1000"}));
  EXPECT_EQ(backwards.exit_code, 2);
  EXPECT_NE(backwards.err.find("--end-unix is before --start-unix"), std::string::npos) << backwards.err;
  const CmdResult label = run_gpumeter(with({"--start-unix", "1000", "--end-unix", "1060", "--label", "=x"}));
  EXPECT_EQ(label.exit_code, 2);
  EXPECT_NE(label.err.find("--label '=x': expected KEY=VALUE"), std::string::npos) << label.err;
  const CmdResult idle = run_gpumeter(
      with({"--start-unix", "1000", "--end-unix", "1060", "--cost-usd", "1", "--idle-cost-usd", "2"}));
  EXPECT_EQ(idle.exit_code, 2) << idle.err;
  const CmdResult status =
      run_gpumeter(with({"--start-unix", "1000", "--end-unix", "1060", "--status", "running"}));
  EXPECT_EQ(status.exit_code, 2) << status.err;
  const CmdResult ok = run_gpumeter(
      with({"--start-unix", "1000", "--end-unix", "1060", "--status", "interrupted", "--stopped-by",
            "slurm:TIMEOUT", "--cost-usd", "0.5", "--unused-gpu-cost-usd", "0.25", "--gpus-allocated",
            "GPU-a,GPU-b", "--gpus-used", "GPU-a", "--label", "slurm.account=physics"}));
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  const auto runs = nlohmann::json::parse(run_gpumeter({"runs", "--json", "--ledger", ledger}).out);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0]["status"], "interrupted");
  EXPECT_EQ(runs[0]["stopped_by"], "slurm:TIMEOUT");
  EXPECT_DOUBLE_EQ(runs[0]["cost_usd"].get<double>(), 0.75);  // billed on both allocated GPUs
  EXPECT_EQ(runs[0]["wall_s"], 60.0);
  EXPECT_EQ(runs[0]["gpus_allocated"].size(), 2u);
  EXPECT_EQ(runs[0]["labels"]["slurm.account"], "physics");
}

}  // namespace
}  // namespace gm::test
