// Which GPUs a job uses where NVML's PIDs are another namespace's (issue 41): the PID namespace probe and
// the device files a process holds (sys, on /proc-like trees written here), the matcher's decisions
// (guard), and the fake NVML's foreign PIDs and minor numbers read through the real loader (gpu).
#include "guard/gpu_match.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>

#include "meter/run_meter.h"
#include "support/support.h"
#include "sys/pid_namespace.h"

namespace gm {
namespace {

namespace fs = std::filesystem;

/// A /proc-like tree: processes with their parent and the files their descriptors point to.
class FakeProc {
 public:
  FakeProc() { fs::create_directories(root()); }
  std::string root() const { return dir_.path() + "/proc"; }
  std::string dev() const { return dir_.path() + "/dev"; }
  void add(std::uint32_t pid, std::uint32_t ppid, const std::vector<std::string>& fds) {
    const std::string p = root() + "/" + std::to_string(pid);
    fs::create_directories(p + "/fd");
    dir_.write("proc/" + std::to_string(pid) + "/stat",
               std::to_string(pid) + " (job) S " + std::to_string(ppid) + " 1");
    int n = 3;
    for (const auto& target : fds) fs::create_symlink(target, p + "/fd/" + std::to_string(n++));
  }
  void device_files(const std::vector<std::string>& names) {
    for (const auto& n : names) dir_.write("dev/" + n, "");
  }
  void self(const std::string& ns_link, const std::string& status) {
    fs::create_directories(root() + "/self/ns");
    fs::create_symlink(ns_link, root() + "/self/ns/pid");
    dir_.write("proc/self/status", status);
  }
  const test::TempDir& dir() const { return dir_; }

 private:
  test::TempDir dir_;
};

TEST(PidNamespaceTest, TheInitialNamespaceIsTheHostsAnyOtherIsForeign) {
  EXPECT_EQ(sys::namespace_inode("pid:[4026531836]"), sys::kInitialPidNamespaceInode);
  EXPECT_EQ(sys::namespace_inode("pid:[4026532178]"), 4026532178ULL);
  EXPECT_FALSE(sys::namespace_inode("pid:4026532178"));
  EXPECT_FALSE(sys::namespace_inode("pid:[]"));

  FakeProc host;
  host.self("pid:[4026531836]", "Name:\tgpumeter\nNSpid:\t15256\n");
  sys::PidNamespaceProbe probe{host.root(), host.dir().path() + "/root",
                               [](const std::string&) { return std::nullopt; }};
  auto facts = sys::detect_pid_namespace(probe);
  EXPECT_EQ(facts.foreign_pids(), false);
  EXPECT_EQ(facts.nspid_levels, 1u);
  EXPECT_TRUE(facts.container_markers.empty());
  EXPECT_NE(facts.describe().find("host's PID namespace"), std::string::npos) << facts.describe();

  FakeProc pod;
  pod.self("pid:[4026532178]", "Name:\tgpumeter\nNSpid:\t88123\t7\n");
  pod.dir().write("root/.dockerenv", "");
  pod.dir().write("proc/self/cgroup",
                  "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0b7c3e2a_"
                  "1d4f_4e5b_9a6c_7d8e9f0a1b2c.slice/cri-containerd-"
                  "3f2e1d0c9b8a7f6e5d4c3b2a1f0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e.scope\n");
  probe = {pod.root(), pod.dir().path() + "/root", [](const std::string& name) -> std::optional<std::string> {
             if (name == "KUBERNETES_SERVICE_HOST") return "10.96.0.1";
             return std::nullopt;
           }};
  facts = sys::detect_pid_namespace(probe);
  EXPECT_EQ(facts.foreign_pids(), true);
  EXPECT_EQ(facts.nspid_levels, 2u);
  ASSERT_EQ(facts.container_markers.size(), 3u);
  EXPECT_EQ(facts.container_markers[0], "/.dockerenv");
  EXPECT_EQ(facts.container_markers[1], "KUBERNETES_SERVICE_HOST");
  EXPECT_EQ(facts.container_markers[2], "cgroup: pod 0b7c3e2a-1d4f-4e5b-9a6c-7d8e9f0a1b2c");
  EXPECT_NE(facts.describe().find(
                "other than the host's (pid:[4026532178], 2 NSpid levels; container markers: /.dockerenv, "
                "KUBERNETES_SERVICE_HOST, cgroup: pod 0b7c3e2a-1d4f-4e5b-9a6c-7d8e9f0a1b2c)"),
            std::string::npos)
      << facts.describe();

  // Without the namespace link, NSpid levels still tell; with neither, it cannot be told.
  sys::PidNamespaceFacts nspid_only;
  nspid_only.nspid_levels = 2;
  EXPECT_EQ(nspid_only.foreign_pids(), true);
  EXPECT_FALSE(sys::PidNamespaceFacts{}.foreign_pids().has_value());
  EXPECT_NE(sys::PidNamespaceFacts{}.describe().find("cannot be read"), std::string::npos);
}

TEST(PidNamespaceTest, GpuDeviceFilesAreTheNumberedOnesUnderTheDeviceFolder) {
  EXPECT_EQ(sys::gpu_minor_of_path("/dev", "/dev/nvidia3"), 3u);
  EXPECT_EQ(sys::gpu_minor_of_path("/dev", "/dev/nvidia12"), 12u);
  EXPECT_FALSE(sys::gpu_minor_of_path("/dev", "/dev/nvidiactl"));
  EXPECT_FALSE(sys::gpu_minor_of_path("/dev", "/dev/nvidia-uvm"));
  EXPECT_FALSE(sys::gpu_minor_of_path("/dev", "/dev/nvidia-caps/nvidia-cap1"));
  EXPECT_FALSE(sys::gpu_minor_of_path("/dev", "/dev/nvidia"));
  EXPECT_FALSE(sys::gpu_minor_of_path("/dev", "/tmp/dev/nvidia0"));
  EXPECT_FALSE(sys::gpu_minor_of_path("/dev", "/dev/nvidia0 (deleted)"));
  EXPECT_EQ(sys::gpu_device_path("/dev", 2), "/dev/nvidia2");
  EXPECT_EQ(sys::gpu_device_root(std::nullopt), "/dev");
  EXPECT_EQ(sys::gpu_device_root(std::string()), "/dev");
  test::TempDir d;
  fs::create_directories(d.path() + "/dev");
  EXPECT_EQ(sys::gpu_device_root(d.path() + "/dev/"), fs::canonical(d.path() + "/dev").string());
  EXPECT_EQ(sys::gpu_device_root(d.path() + "/x/../dev"), fs::canonical(d.path() + "/dev").string());

  FakeProc p;
  p.device_files({"nvidia0", "nvidia1", "nvidiactl"});
  p.add(10, 1, {p.dev() + "/nvidiactl", p.dev() + "/nvidia1", "/tmp/log.txt"});
  p.add(11, 10, {p.dev() + "/nvidia0"});
  p.add(12, 1, {p.dev() + "/nvidia1"});
  const sys::ProcReader proc(p.root());
  EXPECT_TRUE(proc.exists(10));
  EXPECT_FALSE(proc.exists(4000010));
  auto held = sys::held_gpu_device_files(proc, {10, 11}, p.dev());
  EXPECT_EQ(held.minors, (std::set<unsigned>{0, 1}));
  EXPECT_TRUE(held.unreadable.empty());
  EXPECT_EQ(sys::held_gpu_device_files(proc, {10}, p.dev()).minors, std::set<unsigned>{1});
  EXPECT_EQ(sys::gpu_device_holders(proc, p.dev(), 1), (std::set<std::uint32_t>{10, 12}));
  EXPECT_EQ(sys::gpu_device_holders(proc, p.dev(), 0), std::set<std::uint32_t>{11});
  EXPECT_TRUE(sys::gpu_device_file_present(p.dev(), 1));
  EXPECT_FALSE(sys::gpu_device_file_present(p.dev(), 2));
}

TEST(GpuMatchTest, VisibleDevicesNameAGpuByIndexOrUuidNeverByAll) {
  gpu::DeviceInfo d;
  d.index = 1;
  d.uuid = "GPU-c0c0c0c0-1111-2222-3333-444444444444";
  EXPECT_TRUE(guard::visible_devices_name("1", d));
  EXPECT_TRUE(guard::visible_devices_name("0, 1", d));
  EXPECT_TRUE(guard::visible_devices_name("GPU-c0c0c0c0-1111-2222-3333-444444444444", d));
  EXPECT_TRUE(guard::visible_devices_name("GPU-c0c0", d));
  EXPECT_TRUE(guard::visible_devices_name("c0c0c0c0", d));
  EXPECT_FALSE(guard::visible_devices_name("all", d));
  EXPECT_FALSE(guard::visible_devices_name("none", d));
  EXPECT_FALSE(guard::visible_devices_name("void", d));
  EXPECT_FALSE(guard::visible_devices_name("", d));
  EXPECT_FALSE(guard::visible_devices_name("0", d));
  EXPECT_FALSE(guard::visible_devices_name("GPU-ffff", d));
}

/// A container: PID namespace 4026532178, the job (PIDs 1 and 7) holding GPU 0's device file.
class MatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    p_.device_files({"nvidia0", "nvidia1", "nvidiactl"});
    p_.add(1, 0, {p_.dev() + "/nvidiactl"});
    p_.add(7, 1, {p_.dev() + "/nvidia0", p_.dev() + "/nvidiactl"});
    for (unsigned i = 0; i < 2; ++i) {
      gpu::DeviceInfo d;
      d.index = i;
      d.uuid = "GPU-" + std::to_string(i);
      d.minor_number = i;
      devices_.push_back(d);
    }
    config_.proc_root = p_.root();
    config_.dev_root = p_.dev();
    config_.pid_namespace.pid_ns_inode = 4026532178ULL;
  }
  static gpu::DeviceSample busy(unsigned index, const std::vector<std::uint32_t>& pids) {
    gpu::DeviceSample s;
    s.index = index;
    for (auto pid : pids) s.processes.push_back(gpu::ProcessSample{pid, 1ULL << 30, std::nullopt});
    return s;
  }
  std::string notes(guard::JobGpuMatcher& m) {
    std::string all;
    for (const auto& n : m.take_notes()) all += n + "\n";
    return all;
  }
  FakeProc p_;
  std::vector<gpu::DeviceInfo> devices_;
  guard::GpuMatchConfig config_;
};

TEST_F(MatcherTest, APidOfTheJobOnTheGpuIsAMatchAndNeedsNoNote) {
  guard::JobGpuMatcher m(config_, devices_);
  m.begin({1, 7});
  EXPECT_TRUE(m.job_on_gpu(0, busy(0, {7})));
  EXPECT_EQ(m.method(0), guard::GpuMatchMethod::pid);
  EXPECT_TRUE(m.job_holds_memory(busy(0, {7})));
  EXPECT_FALSE(m.job_on_gpu(1, busy(1, {})));
  EXPECT_EQ(notes(m), "");
}

TEST_F(MatcherTest, AnAllocatedGpuHeldByTheJobAndBusyWithForeignPidsIsTheJobs) {
  config_.cuda_visible_devices = "0";
  guard::JobGpuMatcher m(config_, devices_);
  m.begin({1, 7});
  EXPECT_TRUE(m.job_on_gpu(0, busy(0, {4000007})));
  EXPECT_EQ(m.method(0), guard::GpuMatchMethod::device_file);
  EXPECT_TRUE(m.job_holds_memory(busy(0, {4000007})));
  // GPU 1 is busy with a foreign process too, but the job does not hold its device file.
  EXPECT_FALSE(m.job_on_gpu(1, busy(1, {4000099})));
  EXPECT_EQ(m.method(1), guard::GpuMatchMethod::none);
  const std::string n = notes(m);
  EXPECT_NE(n.find("NVML reports processes whose PIDs do not resolve here"), std::string::npos) << n;
  EXPECT_NE(n.find("GPU 0 (GPU-0): the job was matched by its open device file " + p_.dev() + "/nvidia0"),
            std::string::npos)
      << n;
  EXPECT_NE(n.find("allocated to this container (CUDA_VISIBLE_DEVICES=0, " + p_.dev() + "/nvidia0 present)"),
            std::string::npos)
      << n;
  EXPECT_NE(n.find("its use is the job's"), std::string::npos) << n;
  // Said once.
  m.begin({1, 7});
  EXPECT_TRUE(m.job_on_gpu(0, busy(0, {4000007})));
  EXPECT_EQ(notes(m), "");
  // An idle GPU with no process on it: the job holds the file but did no work there this tick.
  m.begin({1, 7});
  EXPECT_FALSE(m.job_on_gpu(0, busy(0, {})));
}

TEST_F(MatcherTest, WithoutAnAllocationTheSplitIsUnknownNeverSilent) {
  config_.nvidia_visible_devices = "all";
  guard::JobGpuMatcher m(config_, devices_);
  m.begin({1, 7});
  EXPECT_TRUE(m.job_on_gpu(0, busy(0, {4000007})));
  const std::string n = notes(m);
  EXPECT_NE(n.find("not allocated to this container alone (NVIDIA_VISIBLE_DEVICES=all)"), std::string::npos)
      << n;
  EXPECT_NE(n.find("cannot be known from inside the container"), std::string::npos) << n;
  EXPECT_EQ(n.find("its use is the job's"), std::string::npos) << n;
}

TEST_F(MatcherTest, MoreForeignProcessesThanHoldersHereMeanOtherContainersUseTheGpu) {
  config_.cuda_visible_devices = "0";
  guard::JobGpuMatcher m(config_, devices_);
  m.begin({1, 7});
  EXPECT_TRUE(m.job_on_gpu(0, busy(0, {4000007, 4100001})));
  const std::string n = notes(m);
  EXPECT_NE(n.find("NVML lists 2 process(es) on it and only 1 process(es) here hold it"), std::string::npos)
      << n;
  EXPECT_NE(n.find("cannot be known from inside"), std::string::npos) << n;
}

TEST_F(MatcherTest, AnotherProcessOfThisContainerHoldingTheGpuMakesTheSplitUnknown) {
  config_.cuda_visible_devices = "0";
  p_.add(30, 0, {p_.dev() + "/nvidia0"});  // a second kernel in the pod, not the job's
  p_.add(40, 0, {p_.dev() + "/nvidia0"});  // gpumeter itself (its NVML holds the device files)
  config_.self_pid = 40;
  guard::JobGpuMatcher m(config_, devices_);
  m.begin({1, 7});
  EXPECT_TRUE(m.job_on_gpu(0, busy(0, {4000007})));
  const std::string n = notes(m);
  EXPECT_NE(n.find("processes of this container outside the job hold it too (PIDs 30)"), std::string::npos)
      << n;
}

TEST_F(MatcherTest, InTheHostNamespaceUnresolvedPidsAreGoneProcessesNotAMatch) {
  config_.pid_namespace.pid_ns_inode = sys::kInitialPidNamespaceInode;
  config_.cuda_visible_devices = "0";
  guard::JobGpuMatcher m(config_, devices_);
  m.begin({1, 7});
  EXPECT_FALSE(m.job_on_gpu(0, busy(0, {4000007})));
  EXPECT_EQ(notes(m), "");
  // A namespace that cannot be read: PIDs that do not resolve are taken as foreign.
  config_.pid_namespace = sys::PidNamespaceFacts{};
  guard::JobGpuMatcher unknown(config_, devices_);
  unknown.begin({1, 7});
  EXPECT_TRUE(unknown.job_on_gpu(0, busy(0, {4000007})));
}

TEST_F(MatcherTest, NoMinorNumberIsSaidAndNotGuessed) {
  devices_[0].minor_number.reset();
  guard::JobGpuMatcher m(config_, devices_);
  m.begin({1, 7});
  EXPECT_FALSE(m.job_on_gpu(0, busy(0, {4000007})));
  EXPECT_NE(notes(m).find("gives no minor number (nvmlDeviceGetMinorNumber not supported)"),
            std::string::npos);
}

TEST_F(MatcherTest, RunMeterCountsTheGpuAsUsedThroughTheMatcher) {
  config_.cuda_visible_devices = "0";
  gpu::StaticGpuBackend backend;
  backend.infos = devices_;
  backend.caps.resize(2);
  backend.samples = {busy(0, {4000007}), busy(1, {4000099})};
  for (auto& s : backend.samples) s.utilization_pct = 50;
  meter::RunMeter meter(backend, {0, 1}, 3'600'000'000, 0);
  guard::JobGpuMatcher m(config_, devices_);
  m.begin({1, 7});
  auto records = meter.tick_with(
      1'000'000'000, [&](unsigned index, const gpu::DeviceSample& s) { return m.job_on_gpu(index, s); });
  ASSERT_EQ(records.size(), 2u);
  EXPECT_TRUE(records[0].job_present);
  EXPECT_FALSE(records[1].job_present);
  EXPECT_EQ(meter.used_uuids(), std::vector<std::string>{"GPU-0"});
  // The PID-set form is the old behaviour: foreign PIDs never match.
  meter::RunMeter by_pid(backend, {0, 1}, 3'600'000'000, 0);
  by_pid.tick(1'000'000'000, std::set<std::uint32_t>{1, 7});
  EXPECT_TRUE(by_pid.used_uuids().empty());
}

TEST(FakeNvmlForeignPidTest, ForeignProcessesGetPidPlusFourMillionAndMinorNumbersTheIndexOrTheScenarios) {
  std::string comm = test::read_file("/proc/self/comm");
  while (!comm.empty() && comm.back() == '\n') comm.pop_back();
  test::TempDir dir;
  const std::string path = dir.write("s.json", R"({"devices": [
        {"timeline": [{"t": 0, "util": 50, "processes": [{"comm": ")" +
                                                   comm + R"(", "foreign_pid": true, "mem_mib": 10},
                                                       {"pid": 77, "foreign_pid": true}]}]},
        {"minor": 5, "timeline": [{"t": 0, "util": 0}]},
        {"minor": null, "timeline": [{"t": 0, "util": 0}]}]})");
  setenv("FAKE_NVML_SCENARIO", path.c_str(), 1);
  gpu::GpuBackendOptions options;
  options.library_path = test::fake_nvml_library();
  auto backend = gpu::open_nvml(options);
  ASSERT_TRUE(backend.ok()) << backend.error().message;
  const auto& devices = (*backend)->devices();
  ASSERT_EQ(devices.size(), 3u);
  EXPECT_EQ(devices[0].minor_number, 0u);
  EXPECT_EQ(devices[1].minor_number, 5u);
  EXPECT_FALSE(devices[2].minor_number.has_value()) << "not supported is data, never 0";
  const auto s = (*backend)->sample(0);
  std::set<std::uint32_t> pids;
  for (const auto& p : s.processes) pids.insert(p.pid);
  EXPECT_TRUE(pids.count(static_cast<std::uint32_t>(getpid()) + 4'000'000)) << "this process, as a host PID";
  EXPECT_FALSE(pids.count(static_cast<std::uint32_t>(getpid())));
  EXPECT_TRUE(pids.count(4'000'077));

  // A malformed "foreign_pid" names the entry.
  const std::string bad = dir.write(
      "bad.json", R"({"devices": [{"timeline": [{"t": 0, "processes": [{"pid": 1, "foreign_pid": 1}]}]}]})");
  setenv("FAKE_NVML_SCENARIO", bad.c_str(), 1);
  auto failed = gpu::open_nvml(options);
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.error().message.find("\"foreign_pid\" must be true or false"), std::string::npos)
      << failed.error().message;
  unsetenv("FAKE_NVML_SCENARIO");
}

}  // namespace
}  // namespace gm
