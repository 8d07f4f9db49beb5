// Issue 37: on a bare box (no Kubernetes, container or Slurm) two training processes of one user were
// exported as one owner `python3`. Each job is an owner of its own: its process group, named by the leader's
// program and script; never the rest of its command line.
#include <gtest/gtest.h>

#include <cmath>

#include "agent_fixture.h"
#include "support/fakes.h"
#include "support/support.h"

namespace gm::test {
namespace {

TEST(BareOwnerIntegrationTest, TwoPython3JobsOfOneUserAreTwoOwners) {
  GM_ASSERT_BUILT();
  TempDir dir;
  using namespace std::string_literals;
  auto add = [&](std::uint32_t pid, std::uint32_t pgrp, const std::string& cmdline) {
    FakeProcess p;
    p.pid = pid;
    p.pgrp = pgrp;
    p.comm = "python3";
    p.cgroup = "0::/\n";  // a machine or container without systemd, as on the H200
    p.uid = 0;
    p.cmdline = cmdline;
    write_fake_process(dir.path() + "/proc", p);
  };
  add(5001, 5001, "python3\0train.py\0--hf-token=TOPSECRET\0"s);
  add(5003, 5001, "python3\0-c\0from multiprocessing.spawn import spawn_main\0"s);  // its DataLoader worker
  add(5002, 5002, "/usr/bin/python3\0/home/alice/finetune.py\0"s);
  const std::string scen = dir.write("s.json", R"({"devices": [{"name": "NVIDIA H200", "uuid": "GPU-h",
    "memory_total_mib": 143771, "timeline": [{"t": 0, "util": 100, "mem_used_mib": 90000, "power_w": 650,
    "processes": [{"pid": 5001, "mem_mib": 40000, "sm_util": 50}, {"pid": 5003, "mem_mib": 1000, "sm_util": 10},
                  {"pid": 5002, "mem_mib": 40000, "sm_util": 40}]}]}]})");
  const CmdResult r = run_gpumeter(
      {"agent", "--once", "--interval", "200ms", "--price", "4", "--proc-root", dir.path() + "/proc"},
      fake_env(scen, dir.path()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string a = R"x(kind="process",owner="python3 train.py (pgid 5001)",user="root"})x";
  const std::string b = R"x(kind="process",owner="python3 finetune.py (pgid 5002)",user="root"})x";
  const std::string dev = R"(gpumeter_owner_cost_usd_total{gpu="0",uuid="GPU-h",model="NVIDIA H200",)";
  const double cost_a = metric(r.out, dev + a), cost_b = metric(r.out, dev + b);
  ASSERT_FALSE(std::isnan(cost_a)) << r.out;
  ASSERT_FALSE(std::isnan(cost_b)) << r.out;
  EXPECT_GT(cost_a, 0);
  EXPECT_GT(cost_b, 0);
  // The worker's SM share goes to its job: 60 of 100 SM-% for train.py, 40 for finetune.py.
  EXPECT_NEAR(cost_a / (cost_a + cost_b), 0.6, 0.02);
  EXPECT_EQ(r.out.find(R"(owner="python3")"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("SECRET"), std::string::npos);
}

}  // namespace
}  // namespace gm::test
