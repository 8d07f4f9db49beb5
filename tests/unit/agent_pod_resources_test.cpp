// Kubernetes device assignments in the agent: the pod-resources cache, matching assignments to GPU and
// MIG UUIDs, naming pod owners from them, and charging GPUs that pods hold without using them.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "agent/agent.h"
#include "support/fakes.h"
#include "support/support.h"

namespace gm::agent {
namespace {

namespace fs = std::filesystem;

const std::string kUid = "0d3c8b2e-1f4a-4b6c-9d8e-7a6b5c4d3e2f";
const std::string kUid2 = "11111111-2222-3333-4444-555555555555";

/// A source whose answer the test sets; counts asks.
class FakePodResources final : public kubelet::PodResourcesSource {
 public:
  Result<std::vector<kubelet::PodDeviceAssignment>> list() override {
    ++asks;
    return answer;
  }
  Result<std::vector<kubelet::PodDeviceAssignment>> answer = std::vector<kubelet::PodDeviceAssignment>{};
  int asks = 0;
};

kubelet::PodDeviceAssignment gpu(std::string ns, std::string pod, std::string container, std::string id) {
  return kubelet::PodDeviceAssignment{std::move(ns), std::move(pod), std::move(container), "nvidia.com/gpu",
                                      std::move(id)};
}

std::string pod_cgroup(const std::string& uid, char container) {
  std::string u = uid;
  for (char& c : u)
    if (c == '-') c = '_';
  return "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + u + ".slice/cri-containerd-" +
         std::string(64, container) + ".scope\n";
}

/// Two H100s: GPU-0 runs PID 100 of pod kUid (container 'a' id), GPU-1 runs nothing.
struct Node {
  test::TempDir dir;
  std::string proc = dir.path() + "/proc";
  gpu::StaticGpuBackend backend;
  util::FakeClock clock;
  FakePodResources source;
  kubelet::PodResourcesCache cache{source, clock};
  std::unique_ptr<sys::OwnerResolver> resolver;

  Node() {
    test::write_fake_process(proc, 100, "python3", pod_cgroup(kUid, 'a'));
    for (unsigned i = 0; i < 2; ++i) {
      backend.infos.push_back(test::h100_info(i));
      gpu::Capabilities c;
      c.utilization = c.memory = c.power = c.processes = c.process_utilization = true;
      backend.caps.push_back(c);
      gpu::DeviceSample s;
      s.index = i;
      s.utilization_pct = i == 0 ? 80 : 0;
      s.power_mw = i == 0 ? 600000 : 70000;
      if (i == 0) s.processes = {{100, 30ull << 30, 80}};
      backend.samples.push_back(s);
    }
    resolver = std::make_unique<sys::OwnerResolver>(
        sys::OwnerOptions{proc, dir.path() + "/pods", dir.path() + "/containers"});
  }
  std::unique_ptr<Collector> collector(bool with_pod_resources = true) {
    return std::make_unique<Collector>(
        backend, *resolver, clock,
        std::vector<std::optional<meter::PriceQuote>>(backend.infos.size(), test::flag_price(3.6)),
        AgentOptions{}, with_pod_resources ? &cache : nullptr);
  }
  /// Baseline, then `n` intervals of 1 s.
  void run(Collector& c, int n) {
    c.collect_once();
    for (int i = 0; i < n; ++i) {
      clock.advance_ns(1'000'000'000);
      c.collect_once();
    }
  }
};

const sys::Owner* find_owner(const Snapshot& s, sys::OwnerKind kind) {
  for (const auto& [k, o] : s.owners)
    if (o.kind == kind) return &o;
  return nullptr;
}

MicroUsd owners_cost(const DeviceView& d) {
  MicroUsd sum = 0;
  for (const auto& [k, oc] : d.owners) sum += oc.cost;
  return sum;
}

TEST(AgentPodResources, DeviceUuidDropsReplicaSuffix) {
  EXPECT_EQ(kubelet::device_uuid_of("GPU-0d3c"), "GPU-0d3c");
  EXPECT_EQ(kubelet::device_uuid_of("GPU-0d3c::3"), "GPU-0d3c");
  EXPECT_EQ(kubelet::device_uuid_of("MIG-9f1e"), "MIG-9f1e");
}

TEST(AgentPodResources, CacheAsksEveryRefreshAndKeepsLastGoodAnswer) {
  util::FakeClock clock;
  FakePodResources src;
  src.answer = std::vector<kubelet::PodDeviceAssignment>{gpu("ml", "trainer-0", "main", "GPU-0")};
  kubelet::PodResourcesCache cache(src, clock, kubelet::PodResourcesCacheOptions{10000, 60000});
  EXPECT_FALSE(cache.up());
  cache.refresh();
  EXPECT_EQ(src.asks, 1);
  EXPECT_TRUE(cache.up());
  ASSERT_EQ(cache.assignments().size(), 1u);
  const auto gen = cache.generation();
  clock.advance_ns(9'000'000'000);
  cache.refresh();  // not due yet
  EXPECT_EQ(src.asks, 1);
  clock.advance_ns(1'000'000'000);
  src.answer = make_error(ErrorKind::unavailable, "deadline exceeded");
  cache.refresh();
  EXPECT_EQ(src.asks, 2);
  EXPECT_FALSE(cache.up());
  EXPECT_EQ(cache.errors(), 1u);
  EXPECT_EQ(cache.last_error(), "deadline exceeded");
  EXPECT_EQ(cache.assignments().size(), 1u);  // last good answer kept
  EXPECT_EQ(cache.generation(), gen);
  for (int i = 0; i < 5; ++i) {
    clock.advance_ns(10'000'000'000);
    cache.refresh();
  }
  EXPECT_EQ(cache.errors(), 6u);
  EXPECT_TRUE(cache.assignments().empty());  // 60 s without a good answer: dropped
  EXPECT_GT(cache.generation(), gen);
  // A missing socket (not Kubernetes) is "not up" but not an error.
  clock.advance_ns(10'000'000'000);
  src.answer = make_error(ErrorKind::not_found, "no socket");
  cache.refresh();
  EXPECT_FALSE(cache.up());
  EXPECT_EQ(cache.errors(), 6u);
}

TEST(AgentPodResources, KubeletSourceWithoutSocket) {
  test::TempDir dir;
  kubelet::KubeletPodResources missing(dir.path() + "/kubelet.sock");
  auto r = missing.list();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, ErrorKind::not_found);
  EXPECT_NE(r.error().message.find(dir.path() + "/kubelet.sock"), std::string::npos);
  kubelet::KubeletPodResources not_socket(dir.write("plain", "x"));
  auto r2 = not_socket.list();
  ASSERT_FALSE(r2);
  EXPECT_EQ(r2.error().kind, ErrorKind::unavailable);
  EXPECT_NE(r2.error().message.find("not a socket"), std::string::npos);
  // A socket file nobody listens on (kubelet stopped): an error, counted by the cache.
  const std::string stale = dir.path() + "/stale.sock";
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", stale.c_str());
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ::close(fd);
  kubelet::KubeletPodResources refused(stale);
  auto r3 = refused.list();
  ASSERT_FALSE(r3);
  EXPECT_EQ(r3.error().kind, ErrorKind::unavailable);
  EXPECT_NE(r3.error().message.find(stale), std::string::npos) << r3.error().message;
}

TEST(AgentPodResources, HoldersByGpuMigAndReplicaUuids) {
  std::vector<gpu::DeviceInfo> devices(2);
  devices[0].uuid = "GPU-0";
  devices[1].uuid = "GPU-1";
  devices[1].mig_instances.resize(2);
  devices[1].mig_instances[0].uuid = "MIG-a";
  devices[1].mig_instances[1].uuid = "MIG-b";
  const auto h = device_holders(devices, {gpu("ml", "p", "c", "GPU-0::0"), gpu("ml", "p", "c", "GPU-0::1"),
                                          gpu("ml", "q", "c", "GPU-0::2"), gpu("ml", "r", "c", "MIG-b"),
                                          gpu("ml", "s", "c", "GPU-unknown"), gpu("x", "fpga", "c", "fpga-0")});
  ASSERT_EQ(h.size(), 2u);
  ASSERT_EQ(h[0].board.size(), 2u);  // p (two replicas, counted once) and q
  EXPECT_EQ(h[0].board[0].pod, "p");
  EXPECT_EQ(h[0].board[1].pod, "q");
  EXPECT_TRUE(h[1].board.empty());
  ASSERT_EQ(h[1].mig.size(), 2u);
  EXPECT_TRUE(h[1].mig[0].empty());
  ASSERT_EQ(h[1].mig[1].size(), 1u);
  EXPECT_EQ(h[1].mig[1][0].pod, "r");
  EXPECT_FALSE(h[1].empty());
}

sys::Owner pod_owner(const std::string& uid, const std::string& container_id) {
  sys::Owner o;
  o.kind = sys::OwnerKind::pod;
  o.pod_uid = uid;
  o.pod = "pod-" + uid;
  o.name = o.pod;
  o.container_id = container_id;
  o.container = container_id.substr(0, 12);
  return o;
}

TEST(AgentPodResources, NamesPodsOnlyWhenTheMatchIsUnique) {
  std::vector<DeviceHolders> holders(3);
  holders[0].board = {{"ml", "trainer-0", "main"}};
  holders[1].board = {{"ml", "trainer-0", "main"}, {"ml", "trainer-0", "sidecar"}};
  holders[2].board = {{"ml", "a", "c"}, {"web", "b", "c"}};  // time-sliced between two pods
  std::map<std::uint32_t, sys::Owner> owners{{1, pod_owner(kUid, std::string(64, 'a'))},
                                             {2, pod_owner(kUid, std::string(64, 'b'))},
                                             {3, pod_owner(kUid2, std::string(64, 'c'))}};
  sys::Owner user;
  user.kind = sys::OwnerKind::user;
  user.name = "alice";
  owners[4] = user;
  // PID 1 on GPUs 0 and 1: one container (main). PID 2 on GPU 1: pod known, container not. PID 3 on GPU 2:
  // two pods hold it, so nothing is learned. PID 4 is not a pod.
  name_pods_from_holders(owners, {{1}, {1, 2, 4}, {3}}, holders);
  EXPECT_EQ(owners[1].name, "ml/trainer-0");
  EXPECT_EQ(owners[1].pod_namespace, "ml");
  EXPECT_EQ(owners[1].pod, "trainer-0");
  EXPECT_EQ(owners[1].container, "main");
  EXPECT_EQ(owners[2].name, "ml/trainer-0");
  EXPECT_EQ(owners[2].container, std::string(12, 'b'));
  EXPECT_EQ(owners[3].name, "pod-" + kUid2);
  EXPECT_EQ(owners[3].pod_namespace, "");
  EXPECT_EQ(owners[4].name, "alice");
}

TEST(AgentPodResources, AMatchTwoPodUidsWouldShareIsDropped) {
  // A process of another pod (say a privileged monitor) on a GPU held by trainer-0: neither is named.
  std::vector<DeviceHolders> holders(1);
  holders[0].board = {{"ml", "trainer-0", "main"}};
  std::map<std::uint32_t, sys::Owner> owners{{1, pod_owner(kUid, std::string(64, 'a'))},
                                             {2, pod_owner(kUid2, std::string(64, 'b'))}};
  name_pods_from_holders(owners, {{1, 2}}, holders);
  EXPECT_EQ(owners[1].name, "pod-" + kUid);
  EXPECT_EQ(owners[2].name, "pod-" + kUid2);
}

TEST(AgentPodResources, HeldMigInstancesPayTheirSlice) {
  gpu::DeviceInfo info;
  info.memory_total_bytes = 80ull << 30;
  gpu::MigInstance a, b, c;
  a.uuid = "MIG-a", a.slice_count = 3, a.board_slices = 7;
  b.uuid = "MIG-b", b.slice_count = 4, b.board_slices = 7;
  c.uuid = "MIG-c", c.memory_total_bytes = 20ull << 30;
  info.mig_instances = {a, b, c};
  DeviceHolders h;
  h.mig.resize(3);
  h.mig[0] = {{"ml", "x", "c"}, {"ml", "y", "c"}};
  h.mig[2] = {{"ml", "z", "c"}};
  const auto shares = split_held_device(7001, info, h);
  ASSERT_EQ(shares.size(), 3u);
  EXPECT_EQ(shares[0].cost + shares[1].cost, 3000);  // 7001 × 3/7 = 3000.43 → 3000, split 1500 + 1500
  EXPECT_EQ(shares[0].cost, 1500);
  EXPECT_NEAR(shares[0].weight, 3.0 / 14, 1e-12);
  EXPECT_EQ(shares[2].cost, 1750);  // 20 of 80 GiB
  // Whole-board holders share the whole interval, the remainder to the first.
  DeviceHolders board;
  board.board = {{"a", "p", "c"}, {"b", "q", "c"}, {"c", "r", "c"}};
  const auto split = split_held_device(100, info, board);
  ASSERT_EQ(split.size(), 3u);
  EXPECT_EQ(split[0].cost, 34);
  EXPECT_EQ(split[1].cost, 33);
  EXPECT_EQ(split[2].cost, 33);
}

TEST(AgentPodResources, CollectorNamesPodFromSocketOverLogs) {
  Node n;
  // The log layout says another name; the kubelet's answer wins.
  fs::create_directories(n.dir.path() + "/pods/old_stale-name_" + kUid + "/main");
  n.source.answer = std::vector<kubelet::PodDeviceAssignment>{gpu("ml", "trainer-0", "main", "GPU-0")};
  auto c = n.collector();
  n.run(*c, 3);
  const Snapshot s = c->snapshot();
  const sys::Owner* o = find_owner(s, sys::OwnerKind::pod);
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->name, "ml/trainer-0");
  EXPECT_EQ(o->pod_namespace, "ml");
  EXPECT_EQ(o->pod, "trainer-0");
  EXPECT_EQ(o->container, "main");
  EXPECT_EQ(o->pod_uid, kUid);
  EXPECT_EQ(n.source.asks, 1);  // 3 s: within one refresh period
  ASSERT_TRUE(s.self.pod_resources_up.has_value());
  EXPECT_TRUE(*s.self.pod_resources_up);
  EXPECT_NE(exposition_text(*c).find("gpumeter_agent_pod_resources_up 1\n"), std::string::npos);
}

TEST(AgentPodResources, HeldIdleGpuIsChargedToItsPodExactly) {
  Node n;
  n.source.answer = std::vector<kubelet::PodDeviceAssignment>{gpu("ml", "trainer-0", "main", "GPU-0"),
                                                              gpu("ml", "trainer-0", "main", "GPU-1")};
  auto c = n.collector();
  n.run(*c, 4);
  const Snapshot s = c->snapshot();
  // One owner series for the pod on both GPUs: the idle GPU reuses the owner its process had.
  ASSERT_EQ(s.owners.size(), 1u);
  const auto& [key, owner] = *s.owners.begin();
  EXPECT_EQ(owner.name, "ml/trainer-0");
  const DeviceView& idle = s.devices[1];
  EXPECT_EQ(idle.cost, 4000);  // 3.6 $/h = 1000 µ$/s
  EXPECT_EQ(idle.unallocated_cost, 0);
  EXPECT_EQ(idle.idle_cost, 4000);
  EXPECT_EQ(idle.owners.at(key).cost, 4000);
  EXPECT_NEAR(idle.owners.at(key).gpu_seconds, 4.0, 1e-9);
  EXPECT_NEAR(idle.owners.at(key).energy_j, 4 * 70.0, 1e-6);
  for (const auto& d : s.devices) EXPECT_EQ(owners_cost(d) + d.unallocated_cost, d.cost);
}

TEST(AgentPodResources, HeldGpuBusyWithoutListedProcessesIsNotAllIdle) {
  Node n;
  n.backend.samples[1].utilization_pct = 25;  // busy, but NVML lists no process
  n.source.answer = std::vector<kubelet::PodDeviceAssignment>{gpu("ml", "trainer-0", "main", "GPU-1")};
  auto c = n.collector();
  n.run(*c, 2);
  const Snapshot snap = c->snapshot();
  const DeviceView& d = snap.devices[1];
  EXPECT_EQ(owners_cost(d), 2000);
  EXPECT_EQ(d.idle_cost, 1500);
}

TEST(AgentPodResources, HeldGpuOfAPodWithoutProcessesGetsItsOwnSeries) {
  Node n;
  n.source.answer =
      std::vector<kubelet::PodDeviceAssignment>{gpu("batch", "waiting-7", "worker", "GPU-1::0")};
  auto c = n.collector();
  n.run(*c, 2);
  const Snapshot s = c->snapshot();
  const DeviceView& idle = s.devices[1];
  ASSERT_EQ(idle.owners.size(), 1u);
  const sys::Owner& o = s.owners.at(idle.owners.begin()->first);
  EXPECT_EQ(o.kind, sys::OwnerKind::pod);
  EXPECT_EQ(o.name, "batch/waiting-7");
  EXPECT_EQ(o.container, "worker");
  EXPECT_EQ(idle.owners.begin()->second.cost, idle.cost);
  EXPECT_EQ(idle.unallocated_cost, 0);
  const std::string text = render_metrics(s);
  EXPECT_NE(text.find("namespace=\"batch\",pod=\"waiting-7\",container=\"worker\""), std::string::npos) << text;
}

TEST(AgentPodResources, HeldMigBoardChargesSliceRestUnallocated) {
  Node n;
  gpu::DeviceInfo& info = n.backend.infos[1];
  info.mig_enabled = true;
  gpu::MigInstance a, b;
  a.uuid = "MIG-a", a.slice_count = 3, a.board_slices = 7;
  b.uuid = "MIG-b", b.slice_count = 4, b.board_slices = 7;
  info.mig_instances = {a, b};
  n.source.answer = std::vector<kubelet::PodDeviceAssignment>{
      kubelet::PodDeviceAssignment{"ml", "small", "main", "nvidia.com/mig-3g.40gb", "MIG-a"}};
  auto c = n.collector();
  n.run(*c, 7);
  const Snapshot s = c->snapshot();
  const DeviceView& d = s.devices[1];
  EXPECT_EQ(d.cost, 7000);
  // Each 1 s interval: 1000 µ$ × 3/7 = 428.57 → 428 to the pod, the rest unallocated.
  EXPECT_EQ(owners_cost(d), 7 * 428);
  EXPECT_EQ(d.unallocated_cost, 7000 - 7 * 428);
  EXPECT_EQ(s.owners.at(d.owners.begin()->first).name, "ml/small");
}

TEST(AgentPodResources, SocketDownFallsBackToLogLayout) {
  Node n;
  fs::create_directories(n.dir.path() + "/pods/ml_trainer-0_" + kUid + "/main");
  n.source.answer = make_error(ErrorKind::unavailable, "connection refused");
  auto c = n.collector();
  n.run(*c, 2);
  const Snapshot s = c->snapshot();
  const sys::Owner* o = find_owner(s, sys::OwnerKind::pod);
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->name, "ml/trainer-0");
  EXPECT_EQ(o->container, std::string(12, 'a'));  // no container log: the short id
  EXPECT_EQ(s.devices[1].unallocated_cost, s.devices[1].cost);  // nobody known to hold GPU 1
  EXPECT_FALSE(*s.self.pod_resources_up);
  EXPECT_EQ(s.self.pod_resources_errors, 1u);
  const std::string text = exposition_text(*c);
  EXPECT_NE(text.find("gpumeter_agent_pod_resources_up 0\n"), std::string::npos);
  EXPECT_NE(text.find("gpumeter_agent_pod_resources_errors_total 1\n"), std::string::npos);
}

TEST(AgentPodResources, DisabledOmitsTheSelfSeries) {
  Node n;
  auto c = n.collector(false);
  n.run(*c, 1);
  EXPECT_FALSE(c->snapshot().self.pod_resources_up.has_value());
  const std::string text = exposition_text(*c);
  EXPECT_EQ(text.find("gpumeter_agent_pod_resources"), std::string::npos);
  const Snapshot snap = c->snapshot();
  const sys::Owner* o = find_owner(snap, sys::OwnerKind::pod);
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->name, "pod-" + kUid);
}

}  // namespace
}  // namespace gm::agent
