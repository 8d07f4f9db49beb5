// deploy/: Prometheus rules pass promtool and their unit tests, every Grafana panel query is valid PromQL over
// metrics the agent really exposes, the Kubernetes manifests parse, and the Slurm epilog records a job's cost
// from a live agent.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "integration/agent_fixture.h"

namespace gm::test {
namespace {

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (std::size_t p = 0; (p = s.find(from, p)) != std::string::npos; p += to.size()) s.replace(p, from.size(), to);
  return s;
}

TEST(AgentDeployIntegrationTest, PrometheusRulesPassPromtool) {
  const CmdResult r = run_command({"promtool", "check", "rules", source_dir() + "/deploy/prometheus/gpumeter-rules.yml"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("SUCCESS"), std::string::npos);
  const std::string rules = read_file(source_dir() + "/deploy/prometheus/gpumeter-rules.yml");
  for (const char* alert : {"GpumeterGpuHeldIdle", "GpumeterGpuLost", "GpumeterNamespaceOverDailyBudget", "GpumeterGpuMemoryHigh",
                            "GpumeterInferenceCostPerMillionTokensHigh"})
    EXPECT_NE(rules.find("alert: " + std::string(alert)), std::string::npos) << alert;
}

// deploy/prometheus/gpumeter-rules.test.yml: every alert fires at its time with its labels and annotations and
// stays silent before its `for:` or when its condition is false; every recording rule gives hand-computed values.
TEST(AgentDeployIntegrationTest, AlertRulesUnitTestsPass) {
  const std::string tests = source_dir() + "/deploy/prometheus/gpumeter-rules.test.yml";
  const CmdResult r = run_command({"promtool", "test", "rules", tests});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("SUCCESS"), std::string::npos) << r.out << r.err;
  // Each alert of the rules file has tests.
  const std::string text = read_file(tests);
  for (const char* alert : {"GpumeterGpuHeldIdle", "GpumeterGpuLost", "GpumeterAgentDown", "GpumeterNamespaceOverDailyBudget",
                            "GpumeterGpuMemoryHigh",
                            "GpumeterInferenceCostPerMillionTokensHigh"})
    EXPECT_NE(text.find("alertname: " + std::string(alert)), std::string::npos) << alert;
}

TEST(AgentDeployIntegrationTest, DashboardPanelsAreValidPromqlOverRealMetrics) {
  TempDir dir;
  const auto dash = nlohmann::json::parse(read_file(source_dir() + "/deploy/grafana/gpumeter-dashboard.json"));
  ASSERT_TRUE(dash.contains("panels"));
  // The metric names the agent really exposes (fake GPU with every reading supported).
  fake_node(dir.path(), 1000, "ml", "p", "1");
  const std::string scen =
      dir.write("s.json", R"({"devices": [{"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-1",
    "memory_total_mib": 81559, "energy_counter": true, "timeline": [{"t": 0, "util": 50, "mem_used_mib": 100,
    "power_w": 100, "temp_c": 40, "processes": [{"pid": 1001, "sm_util": 50}],
    "gpm": {"sm_util": 45, "sm_occupancy": 12, "tensor_util": 30, "fp32_util": 5, "fp16_util": 1, "fp64_util": 0,
            "dram_bw_util": 20}}]}]})");
  auto flags = std::vector<std::string>{"agent", "--once", "--interval", "100ms", "--price", "2"};
  for (const auto& f : node_flags(dir.path())) flags.push_back(f);
  const CmdResult expo = run_gpumeter(flags, fake_env(scen, dir.path()));
  ASSERT_EQ(expo.exit_code, 0) << expo.err;
  std::set<std::string> exposed;
  const std::regex type_re(R"(# TYPE (\S+) )");
  for (std::sregex_iterator it(expo.out.begin(), expo.out.end(), type_re), end; it != end; ++it) exposed.insert((*it)[1]);

  std::string rules = "groups:\n  - name: dashboard\n    rules:\n";
  int n = 0;
  const std::regex metric_re(R"(\b(gpumeter_[a-z_]+)\b)");
  for (const auto& panel : dash["panels"]) {
    ASSERT_TRUE(panel.contains("targets")) << panel["title"];
    for (const auto& t : panel["targets"]) {
      std::string expr = t.at("expr").get<std::string>();
      for (std::sregex_iterator it(expr.begin(), expr.end(), metric_re), end; it != end; ++it)
        EXPECT_TRUE(exposed.count((*it)[1])) << (*it)[1] << " in panel " << panel["title"];
      expr = replace_all(expr, "$__rate_interval", "1m");
      expr = replace_all(expr, "$__range", "1h");
      expr = replace_all(expr, "$instance", ".*");
      expr = replace_all(expr, "$namespace", ".*");
      EXPECT_EQ(expr.find('$'), std::string::npos) << expr;
      rules += "      - record: dashboard_panel_" + std::to_string(++n) + "\n        expr: '" + replace_all(expr, "'", "''") + "'\n";
    }
  }
  EXPECT_GE(n, 10);
  const std::string file = dir.write("dashboard-rules.yml", rules);
  const CmdResult r = run_command({"promtool", "check", "rules", file});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err << rules;
  // The issue's panels: fleet cost, $/h by namespace / job / user, idle waste, utilization, power, budget burn.
  std::string titles;
  for (const auto& p : dash["panels"]) titles += p["title"].get<std::string>() + "\n";
  for (const char* t : {"Fleet cost", "by namespace", "by Slurm job", "by user", "Idle waste", "utilization", "power", "Budget burn"})
    EXPECT_NE(titles.find(t), std::string::npos) << t;
}

TEST(AgentDeployIntegrationTest, KubernetesManifestsParse) {
  const std::string path = source_dir() + "/deploy/kubernetes/gpumeter-daemonset.yaml";
  const std::string check = R"(
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
ds = [d for d in docs if d["kind"] == "DaemonSet"][0]
spec = ds["spec"]["template"]["spec"]
assert spec["hostPID"] is True
mounts = {m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
assert "/host/proc" in mounts and "/host/var/log/pods" in mounts, mounts
args = spec["containers"][0]["args"]
assert "--proc-root=/host/proc" in args, args
pr = [m for m in spec["containers"][0]["volumeMounts"] if m["mountPath"] == "/var/lib/kubelet/pod-resources"]
assert pr and pr[0]["readOnly"] is True, pr
vols = {v["name"]: v for v in spec["volumes"]}
assert vols[pr[0]["name"]]["hostPath"]["path"] == "/var/lib/kubelet/pod-resources", vols
assert "--pod-resources-socket=/var/lib/kubelet/pod-resources/kubelet.sock" in args, args
print(len(docs))
)";
  const CmdResult r = run_command({"python3", "-c", check, path});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "4\n");
}

TEST(AgentDeployIntegrationTest, SlurmEpilogRecordsTheJobCost) {
  GM_ASSERT_BUILT();
  TempDir dir;
  fake_node(dir.path(), 1000, "ml", "p", "4242");
  const std::string scen = dir.write("s.json", R"({"devices": [{"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-1",
    "memory_total_mib": 81559, "energy_counter": true, "timeline": [{"t": 0, "util": 50, "mem_used_mib": 100,
    "power_w": 100, "temp_c": 40, "processes": [{"pid": 1003, "sm_util": 50}, {"pid": 1001, "sm_util": 50}]}]}]})");
  auto flags = std::vector<std::string>{"--price", "36", "--interval", "100ms"};
  for (const auto& f : node_flags(dir.path())) flags.push_back(f);
  int port = 0;
  auto agent = start_agent(scen, dir.path(), flags, port);
  ASSERT_GT(port, 0) << agent->stderr_text();
  const std::map<std::string, std::string> env{{"SLURM_JOB_ID", "4242"},
                                               {"SLURM_JOB_USER", "alice"},
                                               {"GPUMETER_URL", "http://127.0.0.1:" + std::to_string(port)},
                                               {"GPUMETER_SLURM_DIR", dir.path() + "/slurm"},
                                               {"GPUMETER_SLURM_LOG", dir.path() + "/log/jobs.log"},
                                               {"GPUMETER_SLURM_ADMIN_COMMENT", "0"},
                                               {"GPUMETER_SLURM_LEDGER", "0"}};
  const CmdResult pro = run_command({source_dir() + "/deploy/slurm/gpumeter-prolog.sh"}, env);
  EXPECT_EQ(pro.exit_code, 0) << pro.err;
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  const CmdResult epi = run_command({source_dir() + "/deploy/slurm/gpumeter-epilog.sh"}, env);
  EXPECT_EQ(epi.exit_code, 0) << epi.err;
  const std::string log = read_file(dir.path() + "/log/jobs.log");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(log, m, std::regex(R"(job=4242 user=alice account=\S* partition=\S* node=\S+ gpus=\S* cost_usd=([0-9.]+) idle_cost_usd=([0-9.]+) unused_gpu_cost_usd=\S+ energy_j=([0-9.]+))")))
      << log;
  // 36 $/h = 0.01 $/s; half of the GPU for about a second.
  EXPECT_GT(std::stod(m[1]), 0.002);
  EXPECT_LT(std::stod(m[1]), 0.02);
  EXPECT_GT(std::stod(m[2]), 0);  // 50 % utilization: half of the cost is idle
  EXPECT_LT(std::stod(m[2]), std::stod(m[1]));
  EXPECT_GT(std::stod(m[3]), 0);
  EXPECT_EQ(agent->terminate(), 0);
  // With the agent gone, the epilog does not fail the job.
  const CmdResult down = run_command({source_dir() + "/deploy/slurm/gpumeter-epilog.sh"}, env);
  EXPECT_EQ(down.exit_code, 0);
  EXPECT_NE(down.err.find("not reachable"), std::string::npos);
}

}  // namespace
}  // namespace gm::test
