// A real Prometheus server scrapes two agents (two nodes: two fake-NVML scenarios, two fake /proc trees with
// Docker, Kubernetes and Slurm cgroups); PromQL totals and the fleet report agree with the devices' cost.
#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "agent/agent.h"
#include "cli/cli.h"
#include "integration/agent_fixture.h"
#include "report/fleet.h"

namespace gm::test {
namespace {

int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    close(fd);
    return 0;
  }
  const int port = ntohs(a.sin_port);
  close(fd);
  return port;
}

std::string node_scenario(unsigned base, const std::string& model) {
  const auto b = [&](unsigned k) { return std::to_string(base + k); };
  return R"({"devices": [
    {"name": ")" +
         model + R"(", "uuid": "GPU-n)" + b(0) + R"(-0", "memory_total_mib": 81559, "energy_counter": true,
     "timeline": [{"t": 0, "util": 80, "mem_used_mib": 60000, "power_w": 500, "temp_c": 60, "processes": [
        {"pid": )" +
         b(1) + R"(, "sm_util": 50}, {"pid": )" + b(2) + R"(, "sm_util": 20}, {"pid": )" + b(3) +
         R"(, "sm_util": 30}]},
       {"t": 2, "util": 40, "mem_used_mib": 20000, "power_w": 300, "temp_c": 55, "processes": [
        {"pid": )" +
         b(1) + R"(, "mem_mib": 9000}, {"pid": )" + b(4) + R"(, "mem_mib": 1000}]}]},
    {"name": ")" +
         model + R"(", "uuid": "GPU-n)" + b(0) + R"(-1", "memory_total_mib": 81559, "energy_counter": true,
     "timeline": [{"t": 0, "util": 0, "mem_used_mib": 0, "power_w": 70, "temp_c": 30, "processes": []}]}]})";
}

/// An instant query's scalar; at `at_unix_s` when given (queries that must see the same scrapes), else now.
double query_scalar(const std::string& prom, const std::string& promql,
                    std::optional<double> at_unix_s = std::nullopt) {
  std::vector<std::string> args{"-G", "--data-urlencode", "query=" + promql};
  if (at_unix_s) args.insert(args.end(), {"--data-urlencode", fmt::format("time={:.3f}", *at_unix_s)});
  const CmdResult r = curl(prom + "/api/v1/query", args);
  if (r.exit_code != 0) return std::nan("");
  const auto j = nlohmann::json::parse(r.out, nullptr, false);
  if (j.is_discarded() || j.value("status", "") != "success" || j["data"]["result"].empty())
    return std::nan("");
  return std::stod(j["data"]["result"][0]["value"][1].get<std::string>());
}

TEST(AgentPrometheusIntegrationTest, TwoNodesScrapedTotalsAddUp) {
  GM_ASSERT_BUILT();
  ASSERT_EQ(run_command({"sh", "-c", "command -v prometheus"}).exit_code, 0)
      << "prometheus missing (scripts/setup.sh installs it)";
  TempDir dir;
  const std::string n1 = dir.path() + "/node1", n2 = dir.path() + "/node2";
  fake_node(n1, 1000, "ml-team", "trainer-0", "4242");
  fake_node(n2, 2000, "inference", "server-0", "5151");
  // Node 1's Slurm job has an account in its environment (label `account`, for --by account).
  write_text(n1 + "/proc/1003/environ", std::string("SLURM_JOB_ACCOUNT=physics\0", 26));
  const std::string s1 = dir.write("node1.json", node_scenario(1000, "NVIDIA H100 80GB HBM3"));
  const std::string s2 = dir.write("node2.json", node_scenario(2000, "NVIDIA A100-SXM4-80GB"));
  const double price = 3.6, interval_s = 0.5;
  auto flags = [&](const std::string& node) {
    std::vector<std::string> f{"--price", "3.6", "--interval", "500ms"};
    for (const auto& x : node_flags(node)) f.push_back(x);
    return f;
  };
  int p1 = 0, p2 = 0;
  auto a1 = start_agent(s1, n1, flags(n1), p1, "agent1");
  auto a2 = start_agent(s2, n2, flags(n2), p2, "agent2");
  ASSERT_GT(p1, 0) << a1->stderr_text();
  ASSERT_GT(p2, 0) << a2->stderr_text();

  const int prom_port = free_port();
  ASSERT_GT(prom_port, 0);
  const std::string config =
      dir.write("prometheus.yml",
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n"
                "  - job_name: gpumeter\n    static_configs:\n      - targets: ['127.0.0.1:" +
                    std::to_string(p1) + "', '127.0.0.1:" + std::to_string(p2) + "']\n");
  Background prom({"prometheus", "--config.file=" + config, "--storage.tsdb.path=" + dir.path() + "/tsdb",
                   "--web.listen-address=127.0.0.1:" + std::to_string(prom_port), "--log.level=warn"},
                  {}, dir.path(), "prometheus");
  const std::string url = "http://127.0.0.1:" + std::to_string(prom_port);
  bool up = false;
  for (int i = 0; i < 300 && !up; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    up = query_scalar(url, "count(up{job=\"gpumeter\"} == 1)") == 2;
  }
  ASSERT_TRUE(up) << prom.stderr_text();
  std::this_thread::sleep_for(std::chrono::seconds(5));  // past the scenario's t=2 change, several scrapes

  // Instant check while the agents run: every scrape is consistent, so owners + unallocated = devices.
  // Both sums at one evaluation time: two queries at "now" can straddle a scrape.
  const double at_s =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const double devices = query_scalar(url, "sum(gpumeter_gpu_cost_usd_total)", at_s);
  const double split = query_scalar(
      url, "sum(gpumeter_owner_cost_usd_total) + sum(gpumeter_gpu_unallocated_cost_usd_total)", at_s);
  const double one_interval = price * interval_s / 3600.0;
  ASSERT_FALSE(std::isnan(devices));
  EXPECT_GT(devices, 0);
  EXPECT_NEAR(split, devices, one_interval);
  EXPECT_EQ(query_scalar(url, "count(count by (instance) (gpumeter_owner_cost_usd_total{kind=\"pod\"}))"), 2);
  EXPECT_EQ(query_scalar(url, "count(gpumeter_owner_cost_usd_total{kind=\"slurm_job\"})"), 2);
  EXPECT_EQ(query_scalar(url, "count(gpumeter_owner_cost_usd_total{kind=\"container\"})"), 2);

  // Stop the nodes: the stored history no longer changes, so the range totals are stable.
  EXPECT_EQ(a1->terminate(), 0);
  EXPECT_EQ(a2->terminate(), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  const double dev_range = query_scalar(url, "sum(increase(gpumeter_gpu_cost_usd_total[1h]))");
  const double split_range = query_scalar(url,
                                          "sum(increase(gpumeter_owner_cost_usd_total[1h])) + "
                                          "sum(increase(gpumeter_gpu_unallocated_cost_usd_total[1h]))");
  EXPECT_GT(dev_range, 0);
  // increase() extrapolates each series by at most half a scrape: within one interval's price per GPU.
  EXPECT_NEAR(split_range, dev_range, 4 * one_interval * 2);

  for (const std::string by : {"namespace", "job", "account", "user", "gpu"}) {
    const auto rep = report::query_fleet_report(url, 3600'000, by);
    ASSERT_TRUE(rep) << rep.error().message;
    EXPECT_NEAR(rep->device_cost_usd, dev_range, 1e-9) << by;
    EXPECT_NEAR(rep->owner_cost_usd + rep->unallocated_cost_usd, rep->device_cost_usd, 4 * one_interval * 2)
        << by;
    double rows = 0;
    for (const auto& r : rep->rows) rows += r.cost_usd;
    EXPECT_NEAR(rows, by == "gpu" ? rep->device_cost_usd : rep->owner_cost_usd, 1e-9) << by;
    if (by == "namespace") {
      std::set<std::string> keys;
      for (const auto& r : rep->rows) keys.insert(r.key);
      EXPECT_TRUE(keys.count("ml-team") && keys.count("inference") && keys.count("")) << rep->rows.size();
    }
    if (by == "job") {
      std::set<std::string> keys;
      for (const auto& r : rep->rows) keys.insert(r.key);
      EXPECT_TRUE(keys.count("4242") && keys.count("5151"));
    }
    if (by == "account") {
      std::set<std::string> keys;
      for (const auto& r : rep->rows) keys.insert(r.key);
      EXPECT_EQ(keys, (std::set<std::string>{"physics", ""}));
    }
    if (by == "gpu") {
      EXPECT_EQ(rep->rows.size(), 4u);
    }
  }
  // The binary prints the same totals: gpumeter report --prometheus URL --since 1h --by namespace.
  const auto cli =
      run_gpumeter({"report", "--prometheus", url, "--since", "1h", "--by", "namespace", "--json"});
  ASSERT_EQ(cli.exit_code, 0) << cli.err;
  const auto cj = nlohmann::json::parse(cli.out);
  EXPECT_NEAR(cj["device_cost_usd"].get<double>(), dev_range, 1e-9);
  EXPECT_NEAR(cj["owner_cost_usd"].get<double>() + cj["unallocated_cost_usd"].get<double>(), dev_range,
              4 * one_interval * 2);
  // The agents export the idle-held series: the fleet's figure is a number (0 or more), never left out.
  ASSERT_TRUE(cj["idle_held_cost_usd"].is_number()) << cj.dump(2);
  EXPECT_GE(cj["idle_held_cost_usd"].get<double>(), 0);
  EXPECT_LE(cj["idle_held_cost_usd"].get<double>(), cj["owner_cost_usd"].get<double>() + 1e-9);
  const auto text = run_gpumeter({"report", "--prometheus", url, "--since", "1h", "--by", "job"});
  EXPECT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("4242"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("idle held"), std::string::npos) << text.out;
  const auto unreachable = run_gpumeter({"report", "--prometheus", "http://127.0.0.1:1", "--since", "1h"});
  EXPECT_EQ(unreachable.exit_code, 5) << unreachable.err;
  // The CLI entry point `gpumeter report --prometheus` dispatches to prints the same totals.
  {
    const std::string out_path = dir.path() + "/report.json";
    std::fflush(stdout);
    const int saved = dup(1);
    const int fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ASSERT_GE(fd, 0);
    dup2(fd, 1);
    std::vector<std::string> args{"report", "--prometheus", url,         "--since",
                                  "1h",     "--by",         "namespace", "--json"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    EXPECT_TRUE(cli::wants_fleet_report(static_cast<int>(argv.size()), argv.data()));
    const int rc = cli::fleet_report(static_cast<int>(argv.size()), argv.data());
    std::fflush(stdout);
    dup2(saved, 1);
    ::close(saved);
    ::close(fd);
    ASSERT_EQ(rc, 0);
    const auto j = nlohmann::json::parse(read_file(out_path));
    EXPECT_NEAR(j["device_cost_usd"].get<double>(), dev_range, 1e-9);
    EXPECT_NEAR(j["owner_cost_usd"].get<double>() + j["unallocated_cost_usd"].get<double>(), dev_range,
                4 * one_interval * 2);
  }
  // And through the binary: `gpumeter report --prometheus`, JSON and text.
  {
    const CmdResult j =
        run_gpumeter({"report", "--prometheus", url, "--since", "1h", "--by", "job", "--json"});
    ASSERT_EQ(j.exit_code, 0) << j.err;
    const auto rep = nlohmann::json::parse(j.out);
    EXPECT_NEAR(rep["device_cost_usd"].get<double>(), dev_range, 1e-9);
    const CmdResult t = run_gpumeter({"report", "--prometheus", url, "--since", "1h", "--by", "namespace"});
    ASSERT_EQ(t.exit_code, 0) << t.err;
    EXPECT_NE(t.out.find("ml-team"), std::string::npos) << t.out;
    EXPECT_NE(t.out.find("inference"), std::string::npos);
    EXPECT_NE(t.out.find("GPU cost            " + util::format_usd(dev_range)), std::string::npos) << t.out;
    const CmdResult down = run_gpumeter({"report", "--prometheus", "http://127.0.0.1:1", "--since", "1h"});
    EXPECT_EQ(down.exit_code, 5);
    EXPECT_NE(down.err.find("--prometheus"), std::string::npos);
  }
  // Errors name the flag.
  const auto bad = report::query_fleet_report("http://127.0.0.1:1", 3600'000, "namespace");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().kind, ErrorKind::unavailable);
  EXPECT_FALSE(report::query_fleet_report(url, 3600'000, "pod"));
  EXPECT_EQ(prom.terminate(), 0);
}

}  // namespace
}  // namespace gm::test
