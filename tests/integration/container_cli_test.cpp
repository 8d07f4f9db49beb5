// Metering inside a container (issue 41): the real binary in a new PID namespace (`unshare --pid --fork
// --mount-proc`, root as in CI), on fake-NVML scenarios whose processes are reported as the driver reports
// them to a container: with PIDs of another namespace ("foreign_pid": PID + 4,000,000). The job holds its
// GPU's device file open under $GPUMETER_DEV_ROOT (plain files here), which is how gpumeter matches it.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "support/support.h"

namespace gm {
namespace {

using test::TempDir;

constexpr const char* kPython = "/usr/bin/python3";
constexpr const char* kUuid0 = "GPU-c0c0c0c0-1111-2222-3333-444444444444";
constexpr const char* kUuid1 = "GPU-c1c1c1c1-1111-2222-3333-444444444444";

/// An H100 idle for its first 3 s (the job starts up), then at 60 % with the job's process (`comm`) on it,
/// plus `others` (processes of other containers: PIDs that resolve nowhere here).
nlohmann::json h100(const std::string& uuid, const std::vector<nlohmann::json>& processes) {
  return {{"name", "NVIDIA H100 80GB HBM3"},
          {"uuid", uuid},
          {"memory_total_mib", 81559},
          {"power_limit_w", 700},
          {"energy_counter", true},
          {"timeline",
           {{{"t", 0}, {"util", 0}, {"mem_used_mib", 500}, {"power_w", 70}, {"temp_c", 35}},
            {{"t", 3},
             {"util", 60},
             {"mem_used_mib", 20500},
             {"power_w", 400},
             {"temp_c", 60},
             {"processes", nlohmann::json(processes)}}}}};
}

nlohmann::json job_process(const std::string& comm, bool foreign) {
  nlohmann::json p = {{"comm", comm}, {"mem_mib", 20000}, {"sm_util", 60}};
  if (foreign) p["foreign_pid"] = true;
  return p;
}

std::string scenario(const std::vector<nlohmann::json>& devices) {
  return nlohmann::json{{"driver_version", "580.95.05"}, {"devices", nlohmann::json(devices)}}.dump();
}

bool has_finding(const nlohmann::json& report, const std::string& kind) {
  for (const auto& f : report["findings"])
    if (f["kind"] == kind) return true;
  return false;
}

std::string notes_of(const nlohmann::json& report) {
  std::string all;
  for (const auto& n : report["notes"]) all += n.get<std::string>() + "\n";
  return all;
}

class ContainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GM_ASSERT_BUILT();
    // Tests run as root (as in CI): a new PID namespace with its own /proc is what a container gives.
    auto probe = test::run_command({"unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", "echo $$"});
    ASSERT_EQ(probe.exit_code, 0) << "unshare --pid --fork --mount-proc needs root (CAP_SYS_ADMIN): "
                                  << probe.err;
    ASSERT_EQ(probe.out, "1\n") << "the command is PID 1 of its new namespace";
    std::filesystem::create_directories(dev_);
    for (const char* f : {"nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"})
      dir_.write(std::string("dev/") + f, "");
  }
  std::map<std::string, std::string> env(const std::string& scenario_text) {
    auto e = test::fake_env(dir_.write("scenario.json", scenario_text), dir_.path());
    e["GPUMETER_DEV_ROOT"] = dev_;
    e["CUDA_VISIBLE_DEVICES"] = "\x01unset";
    e["NVIDIA_VISIBLE_DEVICES"] = "\x01unset";
    e["KUBERNETES_SERVICE_HOST"] = "\x01unset";
    return e;
  }
  /// `args` in a new PID namespace.
  static std::vector<std::string> in_namespace(std::vector<std::string> args) {
    std::vector<std::string> argv{"unshare", "--pid", "--fork", "--mount-proc"};
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }
  /// A job that opens GPU 0's device file, idles as its process `sleep` for `seconds`.
  std::vector<std::string> job(int seconds) const {
    return {"sh", "-c", "exec 3<\"$GPUMETER_DEV_ROOT/nvidia0\"; exec sleep " + std::to_string(seconds)};
  }
  nlohmann::json run_report(const std::string& name, bool namespaced,
                            const std::map<std::string, std::string>& e) {
    const std::string path = dir_.path() + "/" + name + ".json";
    std::vector<std::string> args{test::gpumeter_binary(), "run", "--price", "3600",
                                  "--json-report",         path,  "--"};
    for (const auto& a : job(8)) args.push_back(a);
    auto r = test::run_command(namespaced ? in_namespace(args) : args, e, std::nullopt, 90);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.err.find("no GPU telemetry"), std::string::npos) << r.err;
    return nlohmann::json::parse(test::read_file(path));
  }
  TempDir dir_;
  std::string dev_ = dir_.path() + "/dev";
};

TEST_F(ContainerTest, RunInAPidNamespaceMatchesTheJobByItsDeviceFileWithTheFiguresOfAPlainRun) {
  // The plain run: same machine, same job, NVML's PIDs are this namespace's (matched by PID).
  auto plain_env = env(scenario({h100(kUuid0, {job_process("sleep", false)})}));
  plain_env["CUDA_VISIBLE_DEVICES"] = "0";
  const auto plain = run_report("plain", false, plain_env);
  ASSERT_EQ(plain["gpus_used"].size(), 1u) << plain.dump();

  // In a container: NVML reports the job's process under a PID of another namespace; GPU 0 is allocated.
  auto e = env(scenario({h100(kUuid0, {job_process("sleep", true)})}));
  e["CUDA_VISIBLE_DEVICES"] = "0";
  const auto j = run_report("container", true, e);
  EXPECT_EQ(j["gpus_used"], nlohmann::json::array({kUuid0})) << j.dump();
  EXPECT_FALSE(has_finding(j, "unused_gpus")) << j["findings"].dump();
  EXPECT_DOUBLE_EQ(j["unused_gpu_cost_usd"].get<double>(), 0.0);
  EXPECT_TRUE(j["gpus"][0]["used"].get<bool>());
  // Start-up ends when the GPU works (3 s into the scenario), as in the plain run.
  ASSERT_TRUE(j["startup_s"].is_number()) << j.dump();
  EXPECT_GE(j["startup_s"].get<double>(), 1.0);
  EXPECT_LE(j["startup_s"].get<double>(), 5.0);
  EXPECT_NEAR(j["startup_s"].get<double>(), plain["startup_s"].get<double>(), 1.5);
  // Idle cost and utilization as without the namespace (the share of the cost: wall times differ a little).
  const double idle_share = j["idle_cost_usd"].get<double>() / j["cost_usd"].get<double>();
  const double plain_idle_share = plain["idle_cost_usd"].get<double>() / plain["cost_usd"].get<double>();
  EXPECT_GT(idle_share, 0.4) << "3 s idle then 40 % idle of 8 s: " << j.dump();
  EXPECT_NEAR(idle_share, plain_idle_share, 0.12);
  EXPECT_NEAR(j["effective_utilization"].get<double>(), plain["effective_utilization"].get<double>(), 0.08);
  EXPECT_NEAR(j["gpus"][0]["util_avg_pct"].get<double>(), plain["gpus"][0]["util_avg_pct"].get<double>(),
              10.0);
  // The report says how the job was matched, and the plain one says nothing of the kind.
  const std::string notes = notes_of(j);
  EXPECT_NE(notes.find("matched by its open device file " + dev_ + "/nvidia0"), std::string::npos) << notes;
  EXPECT_NE(notes.find("PID namespace other than the host's"), std::string::npos) << notes;
  EXPECT_NE(notes.find("allocated to this container (CUDA_VISIBLE_DEVICES=0"), std::string::npos) << notes;
  EXPECT_NE(notes.find("its use is the job's"), std::string::npos) << notes;
  EXPECT_EQ(notes_of(plain).find("device file"), std::string::npos) << notes_of(plain);
  // The ledger keeps it: `report` later (outside the namespace) says the same.
  auto rep = test::run_gpumeter({"report", std::to_string(j["run_id"].get<int>()), "--json"}, e);
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  const auto l = nlohmann::json::parse(rep.out);
  EXPECT_EQ(l["gpus_used"], j["gpus_used"]);
  EXPECT_EQ(notes_of(l), notes);
  for (const auto& a : l["actions"]) EXPECT_NE(a["kind"], "gpu_match") << "a note, not an action";
}

TEST_F(ContainerTest, AGpuSharedWithOtherContainersIsUsedButItsSplitIsSaidToBeUnknowable) {
  // GPU 0: the job and a process of another container (a PID that resolves nowhere here); GPU 1: only
  // another container's process, and the job never opens its device file. Every GPU is visible ("all").
  nlohmann::json other0 = {{"pid", 4100001}, {"mem_mib", 1000}};
  nlohmann::json other1 = {{"pid", 4100002}, {"mem_mib", 1000}};
  auto e = env(scenario({h100(kUuid0, {job_process("sleep", true), other0}), h100(kUuid1, {other1})}));
  e["NVIDIA_VISIBLE_DEVICES"] = "all";
  const auto j = run_report("shared", true, e);
  EXPECT_EQ(j["gpus_allocated"].size(), 2u);
  EXPECT_EQ(j["gpus_used"], nlohmann::json::array({kUuid0})) << "the job holds GPU 0's device file only";
  EXPECT_TRUE(has_finding(j, "unused_gpus")) << "GPU 1 never ran the job: " << j["findings"].dump();
  const std::string notes = notes_of(j);
  EXPECT_NE(notes.find("NVML lists 2 process(es) on it and only 1 process(es) here hold it"),
            std::string::npos)
      << notes;
  EXPECT_NE(notes.find("cannot be known from inside the container"), std::string::npos) << notes;
  EXPECT_EQ(notes.find("its use is the job's"), std::string::npos) << "never a silent 100 %: " << notes;
  EXPECT_EQ(notes.find("GPU 1 ("), std::string::npos) << "GPU 1 was not matched: " << notes;
}

TEST_F(ContainerTest, AGpuThatMayBeSharedSaysSoEvenWhenOnlyTheJobIsOnIt) {
  auto e = env(scenario({h100(kUuid0, {job_process("sleep", true)})}));
  e["NVIDIA_VISIBLE_DEVICES"] = "all";
  const auto j = run_report("maybe", true, e);
  EXPECT_EQ(j["gpus_used"], nlohmann::json::array({kUuid0}));
  const std::string notes = notes_of(j);
  EXPECT_NE(notes.find("not allocated to this container alone (NVIDIA_VISIBLE_DEVICES=all)"),
            std::string::npos)
      << notes;
  EXPECT_NE(notes.find("cannot be known from inside"), std::string::npos) << notes;
}

TEST_F(ContainerTest, AttachInAPidNamespaceMatchesTheProcessByItsDeviceFile) {
  auto e = env(scenario({h100(kUuid0, {job_process("sleep", true)})}));
  e["NVIDIA_VISIBLE_DEVICES"] = kUuid0;  // what the Kubernetes device plugin sets
  const std::string path = dir_.path() + "/attach.json";
  // The process (not gpumeter's child) opens the device file and sleeps; attach meters it until it ends.
  const std::string script =
      "sh -c 'exec 3<\"$GPUMETER_DEV_ROOT/nvidia0\"; exec sleep 8' & \"$0\" attach $! "
      "--price 3600 --json-report \"$1\"; rc=$?; wait; exit $rc";
  auto r = test::run_command(in_namespace({"sh", "-c", script, test::gpumeter_binary(), path}), e,
                             std::nullopt, 90);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(test::read_file(path));
  EXPECT_EQ(j["gpus_used"], nlohmann::json::array({kUuid0})) << j.dump();
  EXPECT_FALSE(has_finding(j, "unused_gpus")) << j["findings"].dump();
  ASSERT_TRUE(j["startup_s"].is_number()) << j.dump();
  EXPECT_GE(j["startup_s"].get<double>(), 1.0);
  EXPECT_LE(j["startup_s"].get<double>(), 5.0);
  const double idle_share = j["idle_cost_usd"].get<double>() / j["cost_usd"].get<double>();
  EXPECT_GT(idle_share, 0.4) << j.dump();
  EXPECT_LT(idle_share, 0.8) << j.dump();
  EXPECT_NEAR(j["gpus"][0]["util_avg_pct"].get<double>(), 40.0, 12.0) << "0 % for 3 s, then 60 %";
  const std::string notes = notes_of(j);
  EXPECT_NE(notes.find("matched by its open device file " + dev_ + "/nvidia0"), std::string::npos) << notes;
  EXPECT_NE(notes.find("allocated to this container (NVIDIA_VISIBLE_DEVICES=" + std::string(kUuid0)),
            std::string::npos)
      << notes;
  EXPECT_NE(r.err.find("note: GPU 0"), std::string::npos) << "said live too: " << r.err;
}

TEST_F(ContainerTest, AnIdleProcessHoldingItsGpuInAPidNamespaceIsIdleGpusHeld) {
  // The GPU idles at 0 % with 20 GiB held by the process, reported under a host PID.
  auto e = env(R"({"devices": [{"name": "NVIDIA H100 80GB HBM3", "uuid": ")" + std::string(kUuid0) +
               R"(", "memory_total_mib": 81559, "timeline": [{"t": 0, "util": 0, "mem_used_mib": 20500,
      "processes": [{"comm": "sleep", "foreign_pid": true, "mem_mib": 20000}]}]}]})");
  e["NVIDIA_VISIBLE_DEVICES"] = kUuid0;
  const std::string path = dir_.path() + "/idle.json";
  const std::string script =
      "sh -c 'exec 3<\"$GPUMETER_DEV_ROOT/nvidia0\"; exec sleep 7' & \"$0\" attach $! "
      "--price 36 --max-idle 2s --json-report \"$1\"; rc=$?; wait; exit $rc";
  auto r = test::run_command(in_namespace({"sh", "-c", script, test::gpumeter_binary(), path}), e,
                             std::nullopt, 90);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(test::read_file(path));
  EXPECT_EQ(j["gpus_used"], nlohmann::json::array({kUuid0})) << j.dump();
  bool held = false;
  for (const auto& a : j["actions"]) held = held || a["kind"] == "idle_gpus_held";
  EXPECT_TRUE(held) << j["actions"].dump();
  EXPECT_NEAR(j["idle_cost_usd"].get<double>(), j["cost_usd"].get<double>(), 0.011) << "idle all along";
}

TEST_F(ContainerTest, DoctorSaysThePidsAreAnotherNamespacesAndNamesTheDeviceFiles) {
  // Busy from the start: the sleep process is on the GPU when doctor looks.
  auto e = env(R"({"devices": [{"name": "NVIDIA H100 80GB HBM3", "timeline": [{"t": 0, "util": 50,
      "processes": [{"comm": "sleep", "foreign_pid": true, "mem_mib": 100}]}]}]})");
  const std::string script =
      "sh -c 'exec sleep 20' & \"$0\" doctor --pod-resources-socket '' --preemption off "
      "--agent 127.0.0.1:1; rc=$?; kill $!; exit $rc";
  auto r =
      test::run_command(in_namespace({"sh", "-c", script, test::gpumeter_binary()}), e, std::nullopt, 60);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("device file     " + dev_ + "/nvidia0 (minor 0)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("PID namespace    gpumeter runs in a PID namespace other than the host's"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("1 of them with PIDs that do not resolve here"), std::string::npos) << r.out;
  // Outside the namespace the same machine's PIDs are the driver's.
  auto plain = test::run_gpumeter(
      {"doctor", "--pod-resources-socket", "", "--preemption", "off", "--agent", "127.0.0.1:1"},
      env(scenario({h100(kUuid0, {job_process("sleep", false)})})));
  EXPECT_NE(plain.out.find("PID namespace    "), std::string::npos) << plain.out;
  EXPECT_EQ(plain.out.find("do not resolve here"), std::string::npos) << plain.out;
}

/// The text a person sees under cell `i`: streams, text/plain of displays and results, errors.
std::string cell_text(const nlohmann::json& nb, std::size_t i) {
  std::string out;
  auto join = [](const nlohmann::json& v) {
    if (v.is_string()) return v.get<std::string>();
    std::string s;
    for (const auto& x : v) s += x.get<std::string>();
    return s;
  };
  for (const auto& o : nb["cells"][i]["outputs"]) {
    const std::string type = o.value("output_type", "");
    if (type == "stream") out += join(o["text"]);
    if ((type == "display_data" || type == "execute_result") && o["data"].contains("text/plain"))
      out += join(o["data"]["text/plain"]) + "\n";
    if (type == "error") out += "ERROR " + o.value("ename", "") + ": " + o.value("evalue", "") + "\n";
  }
  return out;
}

TEST_F(ContainerTest, ANotebookKernelInAPodIsMatchedByItsDeviceFile) {
  auto probe = test::run_command({kPython, "-c", "import ipykernel, nbclient, nbformat, IPython"});
  ASSERT_EQ(probe.exit_code, 0)
      << "python3-ipykernel, python3-nbclient and python3-nbformat are installed by "
         "scripts/setup.sh: "
      << probe.err;
  // A JupyterHub pod: the notebook client runs as `nbdriver` (a link to python3) so that the kernel, started
  // by its kernel spec as python3, is NVML's only python3 process; NVML reports it with a host PID.
  const std::string bin = dir_.path() + "/bin";
  std::filesystem::create_directories(bin);
  std::filesystem::create_symlink(kPython, bin + "/nbdriver");
  dir_.write("jupyter/kernels/python3/kernel.json",
             nlohmann::json{{"argv", {kPython, "-m", "ipykernel_launcher", "-f", "{connection_file}"}},
                            {"display_name", "Python 3"},
                            {"language", "python"}}
                 .dump());
  auto e = env(scenario({h100(kUuid0, {job_process("python3", true)})}));
  e["NVIDIA_VISIBLE_DEVICES"] = kUuid0;
  e["KUBERNETES_SERVICE_HOST"] = "10.96.0.1";
  e["JUPYTER_PATH"] = dir_.path() + "/jupyter";
  e["PYTHONPATH"] = test::source_dir() + "/python";
  e["GPUMETER_BIN"] = test::gpumeter_binary();
  e["PATH"] = "/usr/bin:/bin";
  e["GPUMETER_SOCKET"] = "\x01unset";
  e["JUPYTER_RUNTIME_DIR"] = dir_.path() + "/runtime";
  e["IPYTHONDIR"] = dir_.path() + "/ipython";
  e["PYDEVD_DISABLE_FILE_VALIDATION"] = "1";
  const std::string in =
      dir_.write("nb.json", nlohmann::json({"%load_ext gpumeter", "%gpumeter --price 72",
                                            "import os, time\n"
                                            "gpu = open(os.environ['GPUMETER_DEV_ROOT'] + '/nvidia0')\n"
                                            "time.sleep(7)",
                                            "%gpumeter"})
                                .dump());
  const std::string out = dir_.path() + "/nb.ipynb";
  // PID 1 of the namespace waits for the meter to record the kernel's end before the namespace goes.
  const std::string script =
      "\"$0\" \"$1\" \"$2\" \"$3\" 150; rc=$?; n=0; while [ $n -lt 100 ] && grep -qx gpumeter "
      "/proc/[0-9]*/comm "
      "2>/dev/null; do sleep 0.1; n=$((n+1)); done; exit $rc";
  auto r = test::run_command(in_namespace({"sh", "-c", script, bin + "/nbdriver",
                                           test::source_dir() + "/tests/support/run_notebook.py", in, out}),
                             e, std::nullopt, 200);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto nb = nlohmann::json::parse(test::read_file(out));
  const std::string cell = cell_text(nb, 2);
  EXPECT_NE(cell.find("cell cost $"), std::string::npos) << cell;
  EXPECT_NE(cell.find("util "), std::string::npos) << "per-cell utilization: " << cell;
  const std::string summary = cell_text(nb, 3);
  EXPECT_NE(summary.find("note            GPU 0 (" + std::string(kUuid0) +
                         "): the job was matched by its open "
                         "device file"),
            std::string::npos)
      << summary;

  nlohmann::json run;
  auto runs = test::run_gpumeter({"runs", "--json"}, e);
  ASSERT_EQ(runs.exit_code, 0) << runs.err;
  for (const auto& x : nlohmann::json::parse(runs.out))
    if (x["labels"].value("kind", "") == "notebook") run = x;
  ASSERT_FALSE(run.is_null()) << runs.out;
  auto rep = test::run_gpumeter({"report", std::to_string(run["run_id"].get<int>()), "--json"}, e);
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  const auto j = nlohmann::json::parse(rep.out);
  EXPECT_EQ(j["gpus_used"], nlohmann::json::array({kUuid0})) << rep.out;
  EXPECT_FALSE(has_finding(j, "unused_gpus")) << j["findings"].dump();
  ASSERT_GE(j["cells"].size(), 1u) << rep.out;
  bool util_known = false;
  for (const auto& c : j["cells"])
    if (c["util_pct"].is_number() && c["util_pct"].get<double>() > 5) util_known = true;
  EXPECT_TRUE(util_known) << j["cells"].dump();
  const std::string notes = notes_of(j);
  EXPECT_NE(notes.find("matched by its open device file " + dev_ + "/nvidia0"), std::string::npos) << notes;
  EXPECT_NE(notes.find("KUBERNETES_SERVICE_HOST"), std::string::npos) << notes;
  EXPECT_NE(notes.find("its use is the job's"), std::string::npos) << notes;
}

}  // namespace
}  // namespace gm
