// `gpumeter agent` and `gpumeter top` against a real gRPC server implementing the kubelet's
// v1.PodResourcesLister/List on a unix socket: pod names from the socket (no /var/log/pods tree), GPUs held
// by pods without processes charged to them, and an agent that keeps serving when the socket is absent.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cmath>

#include "integration/agent_fixture.h"
#include "integration/kubelet_fixture.h"
#include "kubelet/pod_resources.h"

namespace gm::test {
namespace {

const std::string kUid = "0d3c8b2e-1f4a-4b6c-9d8e-7a6b5c4d3e2f";

// GPU 0 runs the pod's process; GPU 1 (no process) is held by another pod; GPU 2 is a MIG board with no
// process whose instance MIG-1 (half the board) is held by a third pod.
std::string scenario() {
  return R"({"driver_version": "580.95.05", "devices": [
    {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-busy", "memory_total_mib": 81559, "energy_counter": true,
     "timeline": [{"t": 0, "util": 90, "mem_used_mib": 30000, "power_w": 600, "temp_c": 70, "processes": [
        {"pid": 4001, "mem_mib": 30000, "sm_util": 90}]}]},
    {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-held", "memory_total_mib": 81559, "energy_counter": true,
     "timeline": [{"t": 0, "util": 0, "mem_used_mib": 500, "power_w": 70, "temp_c": 35, "processes": []}]},
    {"name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-mig", "memory_total_mib": 81920, "energy_counter": true,
     "mig": true, "mig_instances": [
      {"uuid": "MIG-1", "gpu_instance_id": 1, "memory_total_mib": 40960, "mem_used_mib": 100},
      {"uuid": "MIG-2", "gpu_instance_id": 2, "memory_total_mib": 20480, "mem_used_mib": 50}],
     "timeline": [{"t": 0, "util": 0, "mem_used_mib": 1000, "power_w": 90, "temp_c": 40, "processes": []}]}]})";
}

/// Σ of owner cost lines on one GPU in an exposition.
double owner_cost_on(const std::string& text, const std::string& gpu) {
  double sum = 0;
  const std::string prefix = "\ngpumeter_owner_cost_usd_total{gpu=\"" + gpu + "\"";
  for (std::size_t pos = 0; (pos = text.find(prefix, pos)) != std::string::npos;) {
    const auto eol = text.find('\n', pos + 1);
    const std::string line = text.substr(pos + 1, eol - pos - 1);
    sum += std::stod(line.substr(line.rfind(' ') + 1));
    pos = eol;
  }
  return sum;
}

class AgentPodResourcesIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GM_ASSERT_BUILT();
    std::string uid_ = kUid;
    for (char& c : uid_)
      if (c == '-') c = '_';
    write_fake_process(dir_.path() + "/proc", 4001, "python3",
                       "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uid_ +
                           ".slice/cri-containerd-" + std::string(64, 'c') + ".scope\n");
    scenario_ = dir_.write("scenario.json", scenario());
  }
  // Owner flags with no kubelet log trees: names can only come from the socket.
  std::vector<std::string> flags(const std::string& socket) const {
    return {"--interval", "200ms", "--price", "3.6", "--proc-root", dir_.path() + "/proc", "--pod-log-root",
            dir_.path() + "/no-logs/pods", "--container-log-root", dir_.path() + "/no-logs/containers",
            "--pod-resources-socket", socket};
  }
  std::vector<Assigned> assigned() const {
    return {{"ml-team", "trainer-0", "trainer", "nvidia.com/gpu", "GPU-busy"},
            {"batch", "held-1", "worker", "nvidia.com/gpu", "GPU-held"},
            {"infer", "small-2", "server", "nvidia.com/mig-3g.40gb", "MIG-1"}};
  }
  TempDir dir_;
  std::string scenario_;
};

TEST_F(AgentPodResourcesIntegrationTest, PodNamesFromSocketAndHeldGpusChargedToPods) {
  const std::string socket = dir_.path() + "/kubelet.sock";
  KubeletServer kubelet(socket, assigned());
  ASSERT_TRUE(kubelet.started());
  std::vector<std::string> args{"agent", "--once"};
  const auto f = flags(socket);
  args.insert(args.end(), f.begin(), f.end());
  const CmdResult r = run_gpumeter(args, fake_env(scenario_, dir_.path()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string& text = r.out;
  EXPECT_EQ(kubelet.calls(), 1);  // one ask for both samples (cached for 10 s)
  // (a) The process's pod named from the socket, with no /var/log/pods tree.
  EXPECT_NE(text.find(R"(gpumeter_owner_cost_usd_total{gpu="0",uuid="GPU-busy",model="NVIDIA H100 80GB HBM3",kind="pod",owner="ml-team/trainer-0",namespace="ml-team",pod="trainer-0",container="trainer"})"),
            std::string::npos) << text;
  EXPECT_EQ(text.find("pod-" + kUid), std::string::npos);
  // (b) GPU 1 has no process but is held by batch/held-1: all of its cost is the pod's, and idle.
  const std::string held = R"({gpu="1",uuid="GPU-held",model="NVIDIA H100 80GB HBM3")";
  const double device1 = metric(text, "gpumeter_gpu_cost_usd_total" + held);
  EXPECT_GT(device1, 0);
  EXPECT_EQ(metric(text, "gpumeter_gpu_unallocated_cost_usd_total" + held), 0);
  EXPECT_DOUBLE_EQ(metric(text, "gpumeter_gpu_idle_cost_usd_total" + held), device1);
  EXPECT_DOUBLE_EQ(metric(text, "gpumeter_owner_cost_usd_total" + held +
                                    R"(,kind="pod",owner="batch/held-1",namespace="batch",pod="held-1",container="worker"})"),
                   device1)
      << text;
  // MIG: the held instance (half of the board) is charged to its pod; the other half stays unallocated.
  const std::string mig = R"({gpu="2",uuid="GPU-mig",model="NVIDIA A100-SXM4-80GB")";
  const double device2 = metric(text, "gpumeter_gpu_cost_usd_total" + mig);
  const double small = metric(text, "gpumeter_owner_cost_usd_total" + mig +
                                        R"(,kind="pod",owner="infer/small-2",namespace="infer",pod="small-2",container="server"})");
  EXPECT_GT(device2, 0);
  EXPECT_NEAR(small, device2 / 2, 2e-6) << text;
  // Σ owners + unallocated = device cost on every GPU (rounded to micro-dollars in the text).
  for (const std::string gpu : {"0", "1", "2"}) {
    const std::string sel = "{gpu=\"" + gpu + "\"";
    EXPECT_NEAR(owner_cost_on(text, gpu) + metric(text, "gpumeter_gpu_unallocated_cost_usd_total" + sel),
                metric(text, "gpumeter_gpu_cost_usd_total" + sel), 1e-9)
        << "gpu " << gpu;
  }
  EXPECT_EQ(metric(text, "gpumeter_agent_pod_resources_up"), 1);
  EXPECT_EQ(metric(text, "gpumeter_agent_pod_resources_errors_total"), 0);
  const std::string expo = dir_.write("expo.txt", text);
  const CmdResult pt = run_command({"sh", "-c", "promtool check metrics < " + expo});
  EXPECT_EQ(pt.exit_code, 0) << pt.out << pt.err;
}

TEST_F(AgentPodResourcesIntegrationTest, TopShowsPodsFromSocket) {
  const std::string socket = dir_.path() + "/kubelet.sock";
  KubeletServer kubelet(socket, assigned());
  ASSERT_TRUE(kubelet.started());
  std::vector<std::string> args{"top", "--once"};
  const auto f = flags(socket);
  args.insert(args.end(), f.begin(), f.end());
  const CmdResult r = run_gpumeter(args, fake_env(scenario_, dir_.path()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("ml-team/trainer-0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("batch/held-1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("infer/small-2"), std::string::npos) << r.out;
}

TEST_F(AgentPodResourcesIntegrationTest, MissingSocketKeepsServingWithUpZero) {
  int port = 0;
  auto agent = start_agent(scenario_, dir_.path(), flags(dir_.path() + "/absent/kubelet.sock"), port);
  ASSERT_GT(port, 0) << agent->stderr_text();
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  const CmdResult m = curl("http://127.0.0.1:" + std::to_string(port) + "/metrics");
  ASSERT_EQ(m.exit_code, 0) << m.err;
  EXPECT_EQ(metric(m.out, "gpumeter_agent_pod_resources_up"), 0) << m.out;
  EXPECT_EQ(metric(m.out, "gpumeter_agent_pod_resources_errors_total"), 0);  // absent is normal, not an error
  // Without names from anywhere, the pod keeps its UID; GPU 1 is nobody's.
  EXPECT_NE(m.out.find("pod=\"pod-" + kUid + "\""), std::string::npos);
  const std::string held = R"({gpu="1",uuid="GPU-held",model="NVIDIA H100 80GB HBM3")";
  EXPECT_EQ(metric(m.out, "gpumeter_gpu_unallocated_cost_usd_total" + held),
            metric(m.out, "gpumeter_gpu_cost_usd_total" + held));
  EXPECT_EQ(agent->stderr_text().find("kubelet"), std::string::npos) << agent->stderr_text();  // no error spam
  EXPECT_EQ(agent->terminate(), 0);
}

TEST_F(AgentPodResourcesIntegrationTest, SlowKubeletIsCutOffByTheDeadline) {
  const std::string socket = dir_.path() + "/kubelet.sock";
  KubeletServer kubelet(socket, assigned());
  ASSERT_TRUE(kubelet.started());
  kubelet::KubeletPodResources source(socket, 300);
  ASSERT_TRUE(source.list());  // answers in time
  kubelet.delay(1500);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = source.list();
  const double took_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, ErrorKind::unavailable);
  EXPECT_LT(took_s, 1.0);
  kubelet.delay(0);
  EXPECT_TRUE(source.list());  // a fresh channel after the failure
}

TEST_F(AgentPodResourcesIntegrationTest, DoctorSaysWhetherTheSocketAnswers) {
  const std::string socket = dir_.path() + "/kubelet.sock";
  {
    KubeletServer kubelet(socket, assigned());
    ASSERT_TRUE(kubelet.started());
    const CmdResult r = run_gpumeter({"doctor", "--pod-resources-socket", socket}, fake_env(scenario_, dir_.path()));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("kubelet pod-resources  " + socket + ": reachable, 3 device assignment(s)"), std::string::npos)
        << r.out;
  }
  const CmdResult absent =
      run_gpumeter({"doctor", "--pod-resources-socket", dir_.path() + "/none.sock"}, fake_env(scenario_, dir_.path()));
  EXPECT_EQ(absent.exit_code, 0) << absent.err;
  EXPECT_NE(absent.out.find("none.sock: absent"), std::string::npos) << absent.out;
}

TEST_F(AgentPodResourcesIntegrationTest, EmptySocketFlagDisablesReading) {
  std::vector<std::string> args{"agent", "--once"};
  const auto f = flags("");
  args.insert(args.end(), f.begin(), f.end());
  const CmdResult r = run_gpumeter(args, fake_env(scenario_, dir_.path()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("gpumeter_agent_pod_resources"), std::string::npos);
}

}  // namespace
}  // namespace gm::test
