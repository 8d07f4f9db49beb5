// Owner attribution from fake /proc trees: Docker, containerd, Kubernetes (cgroupfs and systemd, v1 and
// v2), Slurm (v1 and v2), login users and bare processes.
#include "sys/owner.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "support/fakes.h"
#include "support/support.h"

namespace gm {
namespace {

namespace fs = std::filesystem;

const std::string kCid = "4f1c2a9e7b3d5c6e8f901a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c2d";
const std::string kPodUid = "0d3c8b2e-1f4a-4b6c-9d8e-7a6b5c4d3e2f";

void write_file(const std::string& path, const std::string& content) {
  std::ofstream(path, std::ios::binary) << content;
}

/// Process `pid` of user `uid`, leader of its process group.
void add_proc(const std::string& root, std::uint32_t pid, const std::string& comm, std::uint32_t uid,
              const std::string& cgroup, std::uint64_t start_ticks = 100, const std::string& environ = "") {
  test::FakeProcess p;
  p.pid = pid;
  p.comm = comm;
  p.cgroup = cgroup;
  p.pgrp = pid;
  p.uid = uid;
  p.start_ticks = start_ticks;
  p.environ = environ;
  test::write_fake_process(root, p);
}

TEST(CgroupParse, DockerCgroupfsV1) {
  const auto f = sys::parse_cgroup("12:memory:/docker/" + kCid + "\n11:pids:/docker/" + kCid + "\n");
  ASSERT_TRUE(f.container_id);
  EXPECT_EQ(*f.container_id, kCid);
  EXPECT_FALSE(f.pod_uid);
}

TEST(CgroupParse, DockerSystemdV2) {
  const auto f = sys::parse_cgroup("0::/system.slice/docker-" + kCid + ".scope\n");
  ASSERT_TRUE(f.container_id);
  EXPECT_EQ(*f.container_id, kCid);
}

TEST(CgroupParse, KubernetesCgroupfsV1) {
  const auto f = sys::parse_cgroup("4:memory:/kubepods/burstable/pod" + kPodUid + "/" + kCid + "\n");
  ASSERT_TRUE(f.pod_uid);
  EXPECT_EQ(*f.pod_uid, kPodUid);
  EXPECT_EQ(f.container_id.value_or(""), kCid);
}

TEST(CgroupParse, KubernetesSystemdV2) {
  std::string uid_ = kPodUid;
  for (char& c : uid_)
    if (c == '-') c = '_';
  const auto f = sys::parse_cgroup("0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" +
                                   uid_ + ".slice/cri-containerd-" + kCid + ".scope\n");
  ASSERT_TRUE(f.pod_uid);
  EXPECT_EQ(*f.pod_uid, kPodUid);
  EXPECT_EQ(f.container_id.value_or(""), kCid);
}

TEST(CgroupParse, KubernetesGuaranteedSystemd) {
  std::string uid_ = kPodUid;
  for (char& c : uid_)
    if (c == '-') c = '_';
  const auto f =
      sys::parse_cgroup("0::/kubepods.slice/kubepods-pod" + uid_ + ".slice/crio-" + kCid + ".scope\n");
  EXPECT_EQ(f.pod_uid.value_or(""), kPodUid);
  EXPECT_EQ(f.container_id.value_or(""), kCid);
}

TEST(CgroupParse, SlurmV1AndV2) {
  const auto v1 = sys::parse_cgroup(
      "7:devices:/slurm/uid_1000/job_4242/step_0/task_0\n4:memory:/slurm/uid_1000/job_4242/step_0\n");
  EXPECT_EQ(v1.slurm_job.value_or(""), "4242");
  EXPECT_EQ(v1.slurm_uid.value_or(0), 1000u);
  const auto node = sys::parse_cgroup("4:memory:/slurm_node7/uid_1001/job_77/step_batch\n");
  EXPECT_EQ(node.slurm_job.value_or(""), "77");
  const auto v2 = sys::parse_cgroup("0::/system.slice/slurmstepd.scope/job_9001/step_0/user/task_0\n");
  EXPECT_EQ(v2.slurm_job.value_or(""), "9001");
  EXPECT_FALSE(v2.container_id);
}

TEST(CgroupParse, Slurm2605SluidCgroup) {
  // Slurm 26.05 names the job's cgroup by its SLUID; older releases' job_<id> stays as it was.
  const auto f =
      sys::parse_cgroup("0::/system.slice/slurmstepd.scope/s8FXKTA79XAR00/step_batch/user/task_0\n");
  EXPECT_EQ(f.slurm_sluid.value_or(""), "s8FXKTA79XAR00");
  EXPECT_FALSE(f.slurm_job);
  EXPECT_FALSE(f.container_id);
  EXPECT_FALSE(sys::parse_cgroup("0::/system.slice/sshd.service/s8FXKTA79XAR00\n").slurm_sluid)
      << "outside Slurm";
  EXPECT_FALSE(sys::parse_cgroup("0::/system.slice/slurmstepd.scope/s8fxkta79xar00/step_0\n").slurm_sluid);
  EXPECT_FALSE(sys::parse_cgroup("0::/system.slice/slurmstepd.scope/system\n").slurm_sluid);
  EXPECT_EQ(sys::parse_cgroup("0::/system.slice/slurmstepd.scope/job_9001/step_0\n").slurm_job.value_or(""),
            "9001");
}

TEST(CgroupParse, JobOutsideSlurmIsNotAJob) {
  EXPECT_FALSE(sys::parse_cgroup("0::/system.slice/job_12.service\n").slurm_job);
}

TEST(CgroupParse, UserSessionAndGarbage) {
  EXPECT_EQ(sys::parse_cgroup("0::/user.slice/user-1000.slice/session-3.scope\n").session_uid.value_or(0),
            1000u);
  const auto g = sys::parse_cgroup("garbage\n::\n0::/\n5:x:/pod123/docker-zz.scope\n");
  EXPECT_FALSE(g.pod_uid);
  EXPECT_FALSE(g.container_id);
  EXPECT_FALSE(g.slurm_job);
}

TEST(StatStart, ParsesField22WithSpacesInComm) {
  EXPECT_EQ(
      sys::stat_start_ticks("12 (a b) c) S 1 12 0 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 555 0 0").value_or(0),
      555u);
  EXPECT_FALSE(sys::stat_start_ticks("12 (x) S 1"));
}

class OwnerResolverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    proc_ = dir_.path() + "/proc";
    logs_ = dir_.path() + "/log";
    fs::create_directories(proc_);
    fs::create_directories(logs_ + "/pods/ml-team_trainer-0_" + kPodUid + "/pytorch");
    fs::create_directories(logs_ + "/pods/ml-team_trainer-0_" + kPodUid + "/sidecar");
    fs::create_directories(logs_ + "/containers");
    write_file(logs_ + "/containers/trainer-0_ml-team_pytorch-" + kCid + ".log", "");
  }
  sys::OwnerResolver resolver() {
    return sys::OwnerResolver(sys::OwnerOptions{proc_, logs_ + "/pods", logs_ + "/containers"});
  }
  test::TempDir dir_;
  std::string proc_, logs_;
};

TEST_F(OwnerResolverTest, KubernetesPodNamesFromKubeletLogs) {
  add_proc(proc_, 100, "python3", 0, "0::/kubepods/burstable/pod" + kPodUid + "/" + kCid + "\n");
  auto r = resolver();
  const sys::Owner o = r.resolve(100);
  EXPECT_EQ(o.kind, sys::OwnerKind::pod);
  EXPECT_EQ(o.pod_namespace, "ml-team");
  EXPECT_EQ(o.pod, "trainer-0");
  EXPECT_EQ(o.container, "pytorch");
  EXPECT_EQ(o.name, "ml-team/trainer-0");
  EXPECT_EQ(o.pod_uid, kPodUid);
}

TEST_F(OwnerResolverTest, UnknownPodKeepsUid) {
  const std::string other = "11111111-2222-3333-4444-555555555555";
  add_proc(proc_, 101, "python3", 0, "0::/kubepods/pod" + other + "/" + kCid + "\n");
  auto r = resolver();
  const sys::Owner o = r.resolve(101);
  EXPECT_EQ(o.kind, sys::OwnerKind::pod);
  EXPECT_EQ(o.pod, "pod-" + other);
  EXPECT_EQ(o.pod_namespace, "");
  EXPECT_EQ(o.container, kCid.substr(0, 12));
}

TEST_F(OwnerResolverTest, DockerSlurmUserAndBareProcess) {
  add_proc(proc_, 200, "python3", 0, "0::/system.slice/docker-" + kCid + ".scope\n");
  add_proc(proc_, 300, "python3", 0, "4:memory:/slurm/uid_0/job_4242/step_0\n");
  add_proc(proc_, 301, "torchrun", 0, "0::/system.slice/slurmd.service\n", 100,
           std::string("HOME=/root\0SLURM_JOB_ID=515\0", 29));
  add_proc(proc_, 400, "jupyter", 0, "0::/user.slice/user-0.slice/session-3.scope\n");
  add_proc(proc_, 500, "ollama", 0, "0::/system.slice/ollama.service\n");
  auto r = resolver();
  const sys::Owner docker = r.resolve(200);
  EXPECT_EQ(docker.kind, sys::OwnerKind::container);
  EXPECT_EQ(docker.name, kCid.substr(0, 12));
  EXPECT_EQ(docker.container_id, kCid);
  const sys::Owner job = r.resolve(300);
  EXPECT_EQ(job.kind, sys::OwnerKind::slurm_job);
  EXPECT_EQ(job.slurm_job, "4242");
  EXPECT_EQ(job.user, "root");
  const sys::Owner env_job = r.resolve(301);
  EXPECT_EQ(env_job.kind, sys::OwnerKind::slurm_job);
  EXPECT_EQ(env_job.slurm_job, "515");
  // Issue 37 changed these: a process in a login session is owned by its job (its process group, named by
  // the leader's program and script, never the rest of its command line), a service by its unit.
  const sys::Owner user = r.resolve(400);
  EXPECT_EQ(user.kind, sys::OwnerKind::process);
  EXPECT_EQ(user.name, "python3 train.py (pgid 400)");
  EXPECT_EQ(user.user, "root");
  const sys::Owner bare = r.resolve(500);
  EXPECT_EQ(bare.kind, sys::OwnerKind::process);
  EXPECT_EQ(bare.name, "ollama");
  EXPECT_EQ(bare.user, "root");
  // Never the command line.
  for (const sys::Owner& o : {docker, job, env_job, user, bare})
    EXPECT_EQ(o.key().find("SECRET"), std::string::npos);
}

// Issue 37: on the H200, two training processes of one user were one owner `python3`. Outside a pod,
// container, Slurm job or login unit each process group is a job of its own.
TEST_F(OwnerResolverTest, TwoPython3JobsOfOneUserAreTwoOwners) {
  auto add = [&](std::uint32_t pid, std::uint32_t pgrp, const std::string& cgroup,
                 const std::string& cmdline) {
    test::FakeProcess p;
    p.pid = pid;
    p.comm = "python3";
    p.cgroup = cgroup;
    p.pgrp = pgrp;
    p.uid = 0;
    p.cmdline = cmdline;
    test::write_fake_process(proc_, p);
  };
  using namespace std::string_literals;
  // A container without systemd (cgroup "/"), as on the H200: two jobs, the first with a DataLoader worker.
  add(700, 700, "0::/\n", "python3\0train.py\0--lr\0--token=TOPSECRET\0"s);
  add(701, 700, "0::/\n", "python3\0-c\0from multiprocessing.spawn import spawn_main\0"s);
  add(800, 800, "0::/\n", "/usr/bin/python3\0/home/a/eval.py\0"s);
  // A login session: one owner per process group of the session.
  add(900, 900, "0::/user.slice/user-0.slice/session-7.scope\n", "python3\0train.py\0"s);
  add(901, 901, "0::/user.slice/user-0.slice/session-7.scope\n", "python3\0train.py\0"s);
  // A job started as its own unit (systemd-run --scope) is owned by the unit.
  add(950, 950, "0::/user.slice/user-0.slice/user@0.service/app.slice/run-u42.scope\n", "python3\0x.py\0"s);
  auto r = resolver();
  const sys::Owner a = r.resolve(700), worker = r.resolve(701), b = r.resolve(800);
  EXPECT_EQ(a.kind, sys::OwnerKind::process);
  EXPECT_EQ(a.name, "python3 train.py (pgid 700)");
  EXPECT_EQ(worker.key(), a.key());  // the worker is the leader's job
  EXPECT_EQ(b.name, "python3 eval.py (pgid 800)");
  EXPECT_NE(a.key(), b.key());
  EXPECT_EQ(a.user, "root");
  EXPECT_EQ(b.user, "root");
  const sys::Owner s1 = r.resolve(900), s2 = r.resolve(901);
  EXPECT_EQ(s1.name, "python3 train.py (pgid 900)");
  EXPECT_EQ(s2.name, "python3 train.py (pgid 901)");
  EXPECT_NE(s1.key(), s2.key());
  EXPECT_EQ(s1.user, "root");
  const sys::Owner unit = r.resolve(950);
  EXPECT_EQ(unit.name, "run-u42");
  for (const sys::Owner& o : {a, worker, b, s1, s2, unit})
    EXPECT_EQ(o.key().find("SECRET"), std::string::npos);
}

TEST(JobCommand, ProgramAndScriptOnlyNeverOptionsOrOddText) {
  EXPECT_EQ(sys::job_command({"/usr/bin/python3", "-u", "/srv/train.py", "--api-key=x"}), "python3 train.py");
  EXPECT_EQ(sys::job_command({"torchrun", "--nproc-per-node=8", "train.py"}), "torchrun train.py");
  EXPECT_EQ(sys::job_command({"python3", "https://user:pw@host/x"}), "python3");
  EXPECT_EQ(sys::job_command({"python3", "tok=abc"}), "python3");
  EXPECT_EQ(sys::job_command({"./run me"}), "");
  EXPECT_EQ(sys::job_command({}), "");
}

TEST_F(OwnerResolverTest, SluidCgroupMapsToTheJobId) {
  const std::string cg = "0::/system.slice/slurmstepd.scope/s8FXKTA79XAR00/step_0/user/task_0\n";
  add_proc(proc_, 310, "python3", 0, cg, 100, std::string("HOME=/root\0SLURM_JOB_ID=4243\0", 29));
  add_proc(proc_, 311, "python3", 0, cg);  // environment unreadable: the SLUID names the job
  auto r = resolver();
  const sys::Owner job = r.resolve(310);
  EXPECT_EQ(job.kind, sys::OwnerKind::slurm_job);
  EXPECT_EQ(job.slurm_job, "4243");
  EXPECT_EQ(job.name, "4243");
  const sys::Owner unread = r.resolve(311);
  EXPECT_EQ(unread.kind, sys::OwnerKind::slurm_job);
  EXPECT_EQ(unread.slurm_job, "s8FXKTA79XAR00");
}

TEST_F(OwnerResolverTest, VanishedAndReusedPids) {
  auto r = resolver();
  const sys::Owner gone = r.resolve(999);
  EXPECT_EQ(gone.kind, sys::OwnerKind::unresolved);
  add_proc(proc_, 600, "python3", 0, "0::/system.slice/docker-" + kCid + ".scope\n", 100);
  EXPECT_EQ(r.resolve(600).kind, sys::OwnerKind::container);
  r.end_interval();
  r.end_interval();  // absent for an interval: forgotten
  // The PID is reused by another process (new start time): the cache must not answer the old owner.
  fs::remove_all(proc_ + "/600");
  add_proc(proc_, 600, "vllm", 0, "0::/system.slice/vllm.service\n", 200);
  const sys::Owner reused = r.resolve(600);
  EXPECT_EQ(reused.kind, sys::OwnerKind::process);
  EXPECT_EQ(reused.name, "vllm");
  // Reused while present every interval: noticed at the next start-time check.
  fs::remove_all(proc_ + "/600");
  add_proc(proc_, 600, "sglang", 0, "0::/system.slice/sglang.service\n", 300);
  bool noticed = false;
  for (std::uint64_t i = 0; i <= sys::OwnerResolver::kRecheckIntervals && !noticed; ++i) {
    r.end_interval();
    noticed = r.resolve(600).name == "sglang";
  }
  EXPECT_TRUE(noticed);
}

TEST_F(OwnerResolverTest, MalformedSlurmJobIdInEnvironmentIsIgnored) {
  add_proc(proc_, 600, "python3", 0, "0::/system.slice/slurmd.service\n", 100,
           std::string("SLURM_JOB_ID=12;rm -rf\0", 23));
  auto r = resolver();
  const sys::Owner o = r.resolve(600);
  EXPECT_EQ(o.kind, sys::OwnerKind::process);
  EXPECT_EQ(o.slurm_job, "");
}

TEST(SlurmConf, ValuesAreCaseInsensitiveAndCommentsIgnored) {
  const std::string conf = "# ProctrackType=proctrack/pgid\nproctracktype = x\n  ProcTrackType=proctrack/linuxproc # here\n"
                           "TaskPlugin=task/none\n";
  EXPECT_EQ(sys::slurm_conf_value(conf, "ProctrackType").value_or(""), "proctrack/linuxproc");
  EXPECT_EQ(sys::slurm_conf_value(conf, "TaskPlugin").value_or(""), "task/none");
  EXPECT_FALSE(sys::slurm_conf_value(conf, "Epilog"));
}

TEST(SlurmConf, AttributionMethodFromProctrackAndPrivileges) {
  test::TempDir dir;
  const std::string cg = dir.write("cg.conf", "ProctrackType=proctrack/cgroup\n");
  const std::string lp = dir.write("lp.conf", "ProctrackType=proctrack/linuxproc\n");
  const std::string dflt = dir.write("default.conf", "ClusterName=x\n");
  EXPECT_EQ(sys::slurm_attribution(cg, false).method, sys::SlurmAttribution::Method::cgroup);
  EXPECT_EQ(sys::slurm_attribution(dflt, false).method,
            sys::SlurmAttribution::Method::cgroup);  // Slurm's default
  EXPECT_EQ(sys::slurm_attribution(lp, true).method, sys::SlurmAttribution::Method::environment);
  EXPECT_EQ(sys::slurm_attribution(lp, false).method, sys::SlurmAttribution::Method::unavailable);
  EXPECT_NE(sys::slurm_attribution(lp, false).detail.find("run the agent as root"), std::string::npos);
  EXPECT_EQ(sys::slurm_attribution(dir.path() + "/missing.conf", true).method,
            sys::SlurmAttribution::Method::none);
  EXPECT_STREQ(to_string(sys::SlurmAttribution::Method::environment), "environment");
}

}  // namespace
}  // namespace gm
