// `gpumeter agent` end to end: the real binary, the fake NVML library, fake /proc trees, curl, promtool.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>
#include <vector>
#include <nlohmann/json.hpp>

#include "integration/agent_fixture.h"

namespace gm::test {
namespace {

// Two GPUs: GPU 0 shared by the pod, the container and the Slurm job (SM shares 50/30/20) plus a bare process
// with memory only; GPU 1 idle. `extra` is spliced into device 1 (faults).
std::string scenario(unsigned base, const std::string& extra1 = "", const std::string& top = "") {
  const auto b = [&](unsigned k) { return std::to_string(base + k); };
  return R"({"driver_version": "580.95.05", )" + top + R"( "devices": [
    {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-node)" + b(0) + R"(-0", "pci_bus_id": "00000000:18:00.0",
     "memory_total_mib": 81559, "power_limit_w": 700, "energy_counter": true,
     "timeline": [{"t": 0, "util": 90, "mem_used_mib": 70000, "power_w": 600, "temp_c": 70, "processes": [
        {"pid": )" + b(1) + R"(, "mem_mib": 30000, "sm_util": 50}, {"pid": )" + b(2) + R"(, "mem_mib": 20000, "sm_util": 30},
        {"pid": )" + b(3) + R"(, "mem_mib": 10000, "sm_util": 20}, {"pid": )" + b(4) + R"(, "mem_mib": 5000}]}]},
    {"name": "NVIDIA A100-SXM4-40GB", "uuid": "GPU-node)" + b(0) + R"(-1", "pci_bus_id": "00000000:3B:00.0",
     "memory_total_mib": 40960, "power_limit_w": 400, "energy_counter": true,
     "timeline": [{"t": 0, "util": 0, "mem_used_mib": 500, "power_w": 60, "temp_c": 35, "processes": []}])" +
         extra1 + R"(}]})";
}

class AgentCliIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GM_ASSERT_BUILT();
    fake_node(dir_.path(), 1000, "ml-team", "trainer-0", "4242");
  }
  // Every agent this test started (each test checks that SIGTERM ends it with status 0) left no sanitizer
  // report in its stderr: under `make test-asan` that is "nothing crashes, leaks or hits undefined behaviour".
  void TearDown() override {
    agent_.reset();
    for (const auto& e : std::filesystem::directory_iterator(dir_.path())) {
      if (e.path().extension() == ".err") {
        EXPECT_EQ(sanitizer_report(read_file(e.path().string())), "") << e.path().filename();
      }
    }
  }
  std::string start(const std::string& scen, std::vector<std::string> flags, int& port, const std::string& name = "agent") {
    const std::string path = dir_.write(name + ".json", scen);
    auto nf = node_flags(dir_.path());
    flags.insert(flags.end(), nf.begin(), nf.end());
    agent_ = start_agent(path, dir_.path(), flags, port, name);
    return path;
  }
  TempDir dir_;
  std::unique_ptr<Background> agent_;
};

TEST_F(AgentCliIntegrationTest, MetricsOwnersPromtoolAndNoCommandLines) {
  int port = 0;
  start(scenario(1000), {"--price", "3.6", "--interval", "200ms"}, port);
  ASSERT_GT(port, 0) << agent_->stderr_text();
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  const std::string base = "http://127.0.0.1:" + std::to_string(port);
  const CmdResult m = curl(base + "/metrics", {"-D", dir_.path() + "/headers"});
  ASSERT_EQ(m.exit_code, 0) << m.err;
  const std::string& text = m.out;
  EXPECT_NE(read_file(dir_.path() + "/headers").find("text/plain; version=0.0.4"), std::string::npos);
  // promtool accepts the exposition.
  const std::string expo = dir_.write("expo.txt", text);
  const CmdResult pt = run_command({"sh", "-c", "promtool check metrics < " + expo});
  EXPECT_EQ(pt.exit_code, 0) << pt.out << pt.err;
  // Owners of every kind, with their labels.
  EXPECT_NE(text.find(R"(kind="pod",owner="ml-team/trainer-0",namespace="ml-team",pod="trainer-0",container="trainer")"),
            std::string::npos) << text;
  EXPECT_NE(text.find(R"(kind="container",owner="ffffffffffff",container="ffffffffffff",user="root")"), std::string::npos);
  EXPECT_NE(text.find(R"(kind="slurm_job",owner="4242",slurm_job="4242",user="root")"), std::string::npos);
  EXPECT_NE(text.find(R"(kind="process",owner="ollama",user="root")"), std::string::npos);
  EXPECT_NE(text.find(R"(gpumeter_gpu_price_usd_per_hour{gpu="0",uuid="GPU-node1000-0",model="NVIDIA H100 80GB HBM3",source="price_flag"} 3.6)"),
            std::string::npos);
  // Σ owners + unallocated = device cost, per device, exactly (same scrape).
  for (const std::string gpu : {"0", "1"}) {
    const std::string sel = "{gpu=\"" + gpu + "\"";
    double owners = 0;
    std::size_t pos = 0;
    while ((pos = text.find("\ngpumeter_owner_cost_usd_total" + sel, pos)) != std::string::npos) {
      const auto eol = text.find('\n', pos + 1);
      const std::string line = text.substr(pos + 1, eol - pos - 1);
      owners += std::stod(line.substr(line.rfind(' ') + 1));
      pos = eol;
    }
    const double device = metric(text, "gpumeter_gpu_cost_usd_total" + sel);
    const double unalloc = metric(text, "gpumeter_gpu_unallocated_cost_usd_total" + sel);
    EXPECT_GT(device, 0);
    EXPECT_NEAR(owners + unalloc, device, 1e-9) << "gpu " << gpu;
  }
  EXPECT_EQ(metric(text, "gpumeter_gpu_unallocated_cost_usd_total{gpu=\"1\""),
            metric(text, "gpumeter_gpu_cost_usd_total{gpu=\"1\""));
  // JSON API and the live page.
  const CmdResult j = curl(base + "/api/v1/owners");
  ASSERT_EQ(j.exit_code, 0);
  const auto json = nlohmann::json::parse(j.out);
  EXPECT_EQ(json["devices"].size(), 2u);
  EXPECT_EQ(json["owners"].size(), 4u);
  EXPECT_EQ(json["owners"][0]["owner"], "ml-team/trainer-0");  // the largest SM share
  const CmdResult page = curl(base + "/");
  EXPECT_NE(page.out.find("gpumeter agent"), std::string::npos);
  // Never a command line, anywhere.
  for (const std::string* s : {&text, &j.out, &page.out}) EXPECT_EQ(s->find("TOPSECRET"), std::string::npos);
  EXPECT_EQ(agent_->terminate(), 0);
  EXPECT_EQ(agent_->stderr_text().find("TOPSECRET"), std::string::npos);
}

TEST_F(AgentCliIntegrationTest, DefaultBindIsLoopback) {
  const CmdResult help = run_gpumeter({"agent", "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("127.0.0.1:9835"), std::string::npos);
  const CmdResult bad = run_gpumeter({"agent", "--listen", "nowhere"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--listen"), std::string::npos);
  for (const auto& [flag, value, says] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"--max-owners", "0", "--max-owners: must be greater than 0, got '0'"},
           {"--price", "-1", "--price: must be greater than 0, got '-1'"},
           {"--price", "3usd", "--price: expected a number, got '3usd'"},
           {"--slurm-job-expiry", "soon", "--slurm-job-expiry: "}}) {
    const CmdResult r = run_gpumeter({"agent", "--once", flag, value});
    EXPECT_EQ(r.exit_code, 2) << flag;
    EXPECT_NE(r.err.find(says), std::string::npos) << r.err;
  }
}

TEST_F(AgentCliIntegrationTest, LostGpuShowsDownAndKeepsServing) {
  int port = 0;
  start(scenario(1000, R"(, "faults": [{"t": 1, "until": 1000, "function": "*", "return": "GPU_IS_LOST"}])"),
        {"--price", "3.6", "--interval", "200ms"}, port);
  ASSERT_GT(port, 0) << agent_->stderr_text();
  std::this_thread::sleep_for(std::chrono::milliseconds(2000));
  const CmdResult m = curl("http://127.0.0.1:" + std::to_string(port) + "/metrics");
  ASSERT_EQ(m.exit_code, 0) << m.err;
  EXPECT_EQ(metric(m.out, R"(gpumeter_gpu_up{gpu="1")"), 0) << m.out;
  EXPECT_EQ(metric(m.out, R"(gpumeter_gpu_up{gpu="0")"), 1);
  EXPECT_EQ(m.out.find(R"(gpumeter_gpu_power_watts{gpu="1")"), std::string::npos);
  // The lost GPU still costs money (the instance is paid for): all of it unallocated.
  EXPECT_GT(metric(m.out, R"(gpumeter_gpu_unallocated_cost_usd_total{gpu="1")"), 0);
  EXPECT_EQ(agent_->terminate(), 0);
}

TEST_F(AgentCliIntegrationTest, HungCallKeepsServing) {
  int port = 0;
  start(scenario(1000, R"(, "faults": [{"t": 1, "until": 1000, "function": "nvmlDeviceGetPowerUsage", "hang_ms": 5000}])"),
        {"--price", "3.6", "--interval", "200ms"}, port);
  ASSERT_GT(port, 0) << agent_->stderr_text();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  // During the hangs every scrape still answers quickly.
  for (int i = 0; i < 5; ++i) {
    const CmdResult m = curl("http://127.0.0.1:" + std::to_string(port) + "/metrics", {}, 2);
    ASSERT_EQ(m.exit_code, 0) << m.err;
    EXPECT_NE(m.out.find("gpumeter_gpu_up{gpu=\"0\""), std::string::npos);
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
  }
  const CmdResult m = curl("http://127.0.0.1:" + std::to_string(port) + "/metrics", {}, 2);
  EXPECT_EQ(metric(m.out, R"(gpumeter_gpu_up{gpu="1")"), 0) << m.out;  // unresponsive
  EXPECT_EQ(agent_->terminate(15), 0);
}

TEST_F(AgentCliIntegrationTest, MissingSymbolsOmitSeries) {
  int port = 0;
  start(scenario(1000, "", R"("missing_symbols": ["nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetPowerUsage", "nvmlDeviceGetTemperature"],)"),
        {"--price", "3.6", "--interval", "200ms"}, port);
  ASSERT_GT(port, 0) << agent_->stderr_text();
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  const CmdResult m = curl("http://127.0.0.1:" + std::to_string(port) + "/metrics");
  ASSERT_EQ(m.exit_code, 0);
  for (const char* absent : {"gpumeter_gpu_power_watts", "gpumeter_gpu_energy_joules_total", "gpumeter_gpu_temperature_celsius",
                             "gpumeter_owner_energy_joules_total"})
    EXPECT_EQ(m.out.find(absent), std::string::npos) << absent;
  EXPECT_NE(m.out.find("gpumeter_gpu_cost_usd_total{"), std::string::npos);
  EXPECT_EQ(agent_->terminate(), 0);
}

TEST_F(AgentCliIntegrationTest, ProcessesComingAndGoingEveryInterval) {
  // Device 0's process list changes every 200 ms for 3 s; PIDs without /proc entries vanish mid-way.
  std::string timeline;
  for (int i = 0; i < 15; ++i) {
    const std::string procs = i % 3 == 0 ? "[]"
                              : i % 3 == 1 ? R"([{"pid": 1001, "sm_util": 60}, {"pid": 77777, "sm_util": 10}])"
                                           : R"([{"pid": 1003, "mem_mib": 100}])";
    timeline += (i ? "," : "") + std::string(R"({"t": )") + std::to_string(i * 0.2) +
                R"(, "util": 50, "mem_used_mib": 1000, "power_w": 300, "temp_c": 50, "processes": )" + procs + "}";
  }
  const std::string scen = R"({"devices": [{"name": "NVIDIA L4", "uuid": "GPU-churn", "memory_total_mib": 23034,
    "energy_counter": true, "timeline": [)" + timeline + "]}]}";
  int port = 0;
  start(scen, {"--price", "1.8", "--interval", "100ms", "--state", dir_.path() + "/state.json"}, port);
  ASSERT_GT(port, 0) << agent_->stderr_text();
  std::this_thread::sleep_for(std::chrono::milliseconds(3200));
  const CmdResult m = curl("http://127.0.0.1:" + std::to_string(port) + "/metrics");
  ASSERT_EQ(m.exit_code, 0);
  double owners = 0;
  for (const std::string o : {R"(kind="pod")", R"(kind="slurm_job")", R"(kind="unresolved")"}) {
    const auto pos = m.out.find("gpumeter_owner_cost_usd_total{gpu=\"0\",uuid=\"GPU-churn\",model=\"NVIDIA L4\"," + o);
    ASSERT_NE(pos, std::string::npos) << o << "\n" << m.out;
    owners += metric(m.out.substr(pos), "gpumeter_owner_cost_usd_total");
  }
  EXPECT_NEAR(owners + metric(m.out, "gpumeter_gpu_unallocated_cost_usd_total"), metric(m.out, "gpumeter_gpu_cost_usd_total"), 1e-9);
  EXPECT_EQ(agent_->terminate(), 0);
  // The state file holds the counters; a restarted agent continues from them.
  const double before = metric(m.out, "gpumeter_gpu_cost_usd_total");
  const auto state = nlohmann::json::parse(read_file(dir_.path() + "/state.json"));
  EXPECT_GE(state["devices"]["GPU-churn"]["cost_micros"].get<double>() / 1e6, before);
  start(scen, {"--price", "1.8", "--interval", "100ms", "--state", dir_.path() + "/state.json"}, port, "again");
  ASSERT_GT(port, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const CmdResult m2 = curl("http://127.0.0.1:" + std::to_string(port) + "/metrics");
  EXPECT_GE(metric(m2.out, "gpumeter_gpu_cost_usd_total"), before);
  EXPECT_EQ(agent_->terminate(), 0);
}

TEST_F(AgentCliIntegrationTest, BasicAuthAndTls) {
  const std::string d = dir_.path();
  const CmdResult ssl = run_command({"openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", d + "/server.key",
                                     "-out", d + "/server.crt", "-days", "1", "-subj", "/CN=127.0.0.1",
                                     "-addext", "subjectAltName=IP:127.0.0.1"});
  ASSERT_EQ(ssl.exit_code, 0) << ssl.err;
  // bcrypt hash of "s3cret".
  dir_.write("web.yml",
             "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\nbasic_auth_users:\n"
             "  alice: $2b$04$psC21kNK63cC3cuY4Vb60.tPCaryZtpMd5bvoO1Ae1B2hJEnSnWG6\n");
  int port = 0;
  start(scenario(1000), {"--price", "3.6", "--interval", "200ms", "--web-config", d + "/web.yml"}, port);
  ASSERT_GT(port, 0) << agent_->stderr_text();
  const std::string url = "https://127.0.0.1:" + std::to_string(port) + "/metrics";
  const std::vector<std::string> ca{"--cacert", d + "/server.crt", "-o", "/dev/null", "-w", "%{http_code}"};
  EXPECT_EQ(curl(url, ca).out, "401");
  auto wrong = ca;
  wrong.insert(wrong.end(), {"-u", "alice:nope"});
  EXPECT_EQ(curl(url, wrong).out, "401");
  auto right = ca;
  right.insert(right.end(), {"-u", "alice:s3cret"});
  EXPECT_EQ(curl(url, right).out, "200");
  const CmdResult body = curl(url, {"--cacert", d + "/server.crt", "-u", "alice:s3cret"});
  EXPECT_NE(body.out.find("gpumeter_gpu_up"), std::string::npos);
  EXPECT_EQ(curl("https://127.0.0.1:" + std::to_string(port) + "/api/v1/owners", ca).out, "401");
  // Plain HTTP to the TLS port does not get the metrics.
  const CmdResult plain = curl("http://127.0.0.1:" + std::to_string(port) + "/metrics", {"-u", "alice:s3cret"});
  EXPECT_EQ(plain.out.find("gpumeter_gpu_up"), std::string::npos);
  EXPECT_EQ(agent_->terminate(), 0);
  // A bad web config is a usage error that names the file and line.
  dir_.write("bad.yml", "tls_server_config:\n  cert_file: a\n  nonsense: b\n");
  const CmdResult bad = run_gpumeter({"agent", "--web-config", d + "/bad.yml"}, fake_env(d + "/agent.json", d));
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("bad.yml:3"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace gm::test

namespace gm::test {
namespace {

TEST(AgentMigIntegrationTest, InstancesPricedByTheirShareOfTheBoard) {
  GM_ASSERT_BUILT();
  TempDir dir;
  const std::string scen = dir.write("mig.json", R"({"devices": [{"name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-mig",
    "memory_total_mib": 81920, "energy_counter": true, "mig": true, "mig_instances": [
      {"uuid": "MIG-1", "gpu_instance_id": 1, "memory_total_mib": 40960, "mem_used_mib": 100},
      {"uuid": "MIG-2", "gpu_instance_id": 2, "memory_total_mib": 20480, "mem_used_mib": 50}],
    "timeline": [{"t": 0, "util": 50, "mem_used_mib": 1000, "power_w": 200, "temp_c": 40, "processes": []}]}]})");
  const CmdResult r = run_gpumeter({"agent", "--once", "--interval", "200ms", "--price", "7"}, fake_env(scen, dir.path()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(metric(r.out, R"(gpumeter_mig_price_usd_per_hour{gpu="0",uuid="GPU-mig",model="NVIDIA A100-SXM4-80GB",mig_uuid="MIG-1")"), 3.5);
  EXPECT_EQ(metric(r.out, R"(gpumeter_mig_price_usd_per_hour{gpu="0",uuid="GPU-mig",model="NVIDIA A100-SXM4-80GB",mig_uuid="MIG-2")"), 1.75);
  const double board = metric(r.out, "gpumeter_gpu_cost_usd_total{");
  const double mig1 = metric(r.out, R"(gpumeter_mig_cost_usd_total{gpu="0",uuid="GPU-mig",model="NVIDIA A100-SXM4-80GB",mig_uuid="MIG-1")");
  EXPECT_GT(board, 0);
  EXPECT_NEAR(mig1, board / 2, 2e-6);
  const std::string expo = dir.write("expo.txt", r.out);
  EXPECT_EQ(run_command({"sh", "-c", "promtool check metrics < " + expo}).exit_code, 0);
}

TEST(AgentMigIntegrationTest, SlicesFromNvmlPriceInstancesBySliceNotMemory) {
  GM_ASSERT_BUILT();
  TempDir dir;
  // An H100 split 3g.40gb + 1g.10gb: by slices 3/7 and 1/7 of the board, by memory 40192/81559 and 9856/81559.
  const std::string scen = dir.write("mig.json", R"({"devices": [{"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-h",
    "memory_total_mib": 81559, "energy_counter": true, "mig": true, "mig_instances": [
      {"uuid": "MIG-3g", "gpu_instance_id": 2, "memory_total_mib": 40192, "mem_used_mib": 100, "slices": 3},
      {"uuid": "MIG-1g", "gpu_instance_id": 9, "memory_total_mib": 9856, "mem_used_mib": 50, "slices": 1},
      {"uuid": "MIG-old", "gpu_instance_id": 10, "memory_total_mib": 9856, "mem_used_mib": 50}],
    "timeline": [{"t": 0, "util": 50, "mem_used_mib": 1000, "power_w": 200, "temp_c": 40, "processes": []}]}]})");
  const CmdResult r = run_gpumeter({"agent", "--once", "--interval", "200ms", "--price", "7"}, fake_env(scen, dir.path()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string dev = R"({gpu="0",uuid="GPU-h",model="NVIDIA H100 80GB HBM3",)";
  EXPECT_EQ(metric(r.out, "gpumeter_mig_price_usd_per_hour" + dev + R"(mig_uuid="MIG-3g",gpu_instance="2"})"), 3.0) << r.out;
  EXPECT_EQ(metric(r.out, "gpumeter_mig_price_usd_per_hour" + dev + R"(mig_uuid="MIG-1g",gpu_instance="9"})"), 1.0);
  // An instance whose NVML gives no slice count falls back to its memory share.
  EXPECT_NEAR(metric(r.out, "gpumeter_mig_price_usd_per_hour" + dev + R"(mig_uuid="MIG-old",gpu_instance="10"})"),
              7.0 * 9856 / 81559, 1e-6);
  const CmdResult g = run_gpumeter({"gpus", "--json"}, fake_env(scen, dir.path()));
  ASSERT_EQ(g.exit_code, 0) << g.err;
  const auto j = nlohmann::json::parse(g.out);
  const auto& migs = j["devices"][0]["mig_instances"];
  ASSERT_EQ(migs.size(), 3u) << g.out;
  EXPECT_EQ(migs[0]["slices"], 3);
  EXPECT_EQ(migs[0]["board_slices"], 7);
  EXPECT_TRUE(migs[2]["slices"].is_null());
}

}  // namespace
}  // namespace gm::test
