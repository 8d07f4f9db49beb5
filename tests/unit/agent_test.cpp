// The agent's collector, exposition, state file and web config, on a StaticGpuBackend and a FakeClock.
#include "agent/agent.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "support/fakes.h"
#include "support/support.h"

namespace gm::agent {
namespace {

namespace fs = std::filesystem;

void write_file(const std::string& path, const std::string& content) { std::ofstream(path, std::ios::binary) << content; }

gpu::DeviceSample busy_sample(unsigned index) {
  gpu::DeviceSample s;
  s.index = index;
  s.utilization_pct = 75;
  s.memory_used_bytes = 40ull << 30;
  s.power_mw = 500000;
  s.temperature_c = 65;
  s.processes = {{100, 30ull << 30, 60}, {200, 10ull << 30, 20}, {300, 1ull << 30, std::nullopt}};
  return s;
}

struct Fixture {
  test::TempDir dir;
  std::string proc = dir.path() + "/proc";
  gpu::StaticGpuBackend backend;
  util::FakeClock clock;
  std::unique_ptr<sys::OwnerResolver> resolver;

  explicit Fixture(unsigned gpus = 1) {
    fs::create_directories(proc);
    test::write_fake_process(proc, 100, "python3",
                             "0::/system.slice/docker-" + std::string(64, 'a') + ".scope\n");
    test::write_fake_process(proc, 200, "python3", "4:memory:/slurm/uid_0/job_4242/step_0\n");
    test::write_fake_process(proc, 300, "ollama", "0::/system.slice/ollama.service\n");
    for (unsigned i = 0; i < gpus; ++i) {
      backend.infos.push_back(test::h100_info(i));
      gpu::Capabilities c;
      c.utilization = c.memory = c.power = c.temperature = c.processes = c.process_utilization = true;
      backend.caps.push_back(c);
      backend.samples.push_back(busy_sample(i));
    }
    resolver = std::make_unique<sys::OwnerResolver>(
        sys::OwnerOptions{proc, dir.path() + "/pods", dir.path() + "/containers"});
  }
  std::vector<std::optional<meter::PriceQuote>> prices(double usd) const {
    return std::vector<std::optional<meter::PriceQuote>>(backend.infos.size(), test::flag_price(usd));
  }
};

double metric_value(const std::string& text, const std::string& prefix) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(prefix, 0) == 0) return std::stod(line.substr(line.rfind(' ') + 1));
  ADD_FAILURE() << "no line starting with " << prefix;
  return -1;
}

TEST(AgentExposition, EscapesLabelValues) {
  EXPECT_EQ(escape_label_value(R"(a"b\c)" "\n" "d"), R"(a\"b\\c\nd)");
  EXPECT_EQ(escape_label_value("plain ünïcode"), "plain ünïcode");
}

TEST(AgentCollector, SplitsEveryIntervalExactly) {
  Fixture fx;
  Collector c(fx.backend, *fx.resolver, fx.clock, fx.prices(3.6), AgentOptions{});
  c.collect_once();  // baseline: no cost yet
  for (int i = 0; i < 10; ++i) {
    fx.clock.advance_ns(1'000'000'000 + i * 7'777'777);
    if (i == 4) fx.backend.samples[0].processes.clear();  // an interval with nobody: unallocated
    if (i == 5) fx.backend.samples[0] = busy_sample(0);
    c.collect_once();
  }
  const Snapshot s = c.snapshot();
  const DeviceView& d = s.devices.at(0);
  MicroUsd owners = 0;
  for (const auto& [k, oc] : d.owners) owners += oc.cost;
  EXPECT_EQ(owners + d.unallocated_cost, d.cost);
  // 3.6 $/h = 1000 micro-dollars per second; 10 s + 7.777777 ms × 45 = 10.35 s.
  EXPECT_EQ(d.cost, 10349);
  EXPECT_GT(d.unallocated_cost, 0);
  EXPECT_EQ(s.owners.size(), 3u);
  // SM shares 60:20, the process without an SM sample gets nothing.
  bool saw_container = false, saw_job = false, saw_process = false;
  for (const auto& [k, o] : s.owners) {
    const auto& oc = d.owners.at(k);
    const double allocated = static_cast<double>(d.cost - d.unallocated_cost);
    if (o.kind == sys::OwnerKind::container) {
      saw_container = true;
      EXPECT_NEAR(static_cast<double>(oc.cost), 0.75 * allocated, 2);
    }
    if (o.kind == sys::OwnerKind::slurm_job) {
      saw_job = true;
      EXPECT_EQ(o.slurm_job, "4242");
      EXPECT_NEAR(static_cast<double>(oc.cost), 0.25 * allocated, 2);
    }
    if (o.kind == sys::OwnerKind::process) {
      saw_process = true;
      EXPECT_EQ(oc.cost, 0);
    }
  }
  EXPECT_TRUE(saw_container && saw_job && saw_process);
  const std::string text = exposition_text(c);
  EXPECT_NEAR(metric_value(text, "gpumeter_gpu_cost_usd_total{"), 0.010349, 1e-12);
  EXPECT_NE(text.find("kind=\"slurm_job\",owner=\"4242\",slurm_job=\"4242\",user=\"root\""), std::string::npos) << text;
  EXPECT_NE(text.find("gpumeter_agent_scrapes_total 1\n"), std::string::npos);
}

TEST(AgentExposition, OmitsWhatTheHardwareCannotGive) {
  Fixture fx;
  fx.backend.caps[0].power = false;
  fx.backend.caps[0].utilization = false;
  gpu::DeviceSample& s = fx.backend.samples[0];
  s.power_mw.reset();
  s.temperature_c.reset();
  s.utilization_pct.reset();
  std::vector<std::optional<meter::PriceQuote>> none(1);
  Collector c(fx.backend, *fx.resolver, fx.clock, none, AgentOptions{});
  c.collect_once();
  fx.clock.advance_ns(1'000'000'000);
  c.collect_once();
  const std::string text = render_metrics(c.snapshot());
  for (const char* absent : {"gpumeter_gpu_power_watts", "gpumeter_gpu_temperature_celsius", "gpumeter_gpu_utilization_ratio",
                             "gpumeter_gpu_energy_joules_total", "gpumeter_gpu_cost_usd_total", "gpumeter_gpu_price_usd_per_hour",
                             "gpumeter_owner_cost_usd_total", "gpumeter_owner_energy_joules_total", "gpumeter_gpu_idle_cost"})
    EXPECT_EQ(text.find(absent), std::string::npos) << absent;
  // Golden: what remains for this device, exactly.
  const std::string labels = "{gpu=\"0\",uuid=\"GPU-0\",model=\"NVIDIA H100 80GB HBM3\"}";
  EXPECT_NE(text.find("# TYPE gpumeter_gpu_up gauge\ngpumeter_gpu_up" + labels + " 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("gpumeter_gpu_memory_used_bytes" + labels + " 42949672960\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE gpumeter_owner_gpu_seconds_total counter\n"), std::string::npos);
}

TEST(AgentExposition, GoldenDeviceBlockWithEscapedModel) {
  Fixture fx;
  fx.backend.infos[0].name = "Weird \"GPU\"\\n\nX";
  Collector c(fx.backend, *fx.resolver, fx.clock, fx.prices(2.5), AgentOptions{});
  c.collect_once();
  fx.clock.advance_ns(2'000'000'000);
  c.collect_once();
  const std::string text = render_metrics(c.snapshot());
  const std::string expected =
      "# HELP gpumeter_gpu_up 1 when the last sample of the GPU succeeded, 0 when it is lost or unresponsive.\n"
      "# TYPE gpumeter_gpu_up gauge\n"
      "gpumeter_gpu_up{gpu=\"0\",uuid=\"GPU-0\",model=\"Weird \\\"GPU\\\"\\\\n\\nX\"} 1\n"
      "# HELP gpumeter_gpu_price_usd_per_hour Price of one GPU-hour of this device, labelled with where it came from.\n"
      "# TYPE gpumeter_gpu_price_usd_per_hour gauge\n"
      "gpumeter_gpu_price_usd_per_hour{gpu=\"0\",uuid=\"GPU-0\",model=\"Weird \\\"GPU\\\"\\\\n\\nX\",source=\"price_flag\"} 2.5\n"
      "# HELP gpumeter_gpu_cost_usd_total Cost of the GPU since metering began, in USD.\n"
      "# TYPE gpumeter_gpu_cost_usd_total counter\n"
      "gpumeter_gpu_cost_usd_total{gpu=\"0\",uuid=\"GPU-0\",model=\"Weird \\\"GPU\\\"\\\\n\\nX\"} 0.001388\n";
  EXPECT_EQ(text.substr(0, expected.size()), expected);
}

TEST(AgentCollector, LostDeviceIsDownAndStillCosts) {
  Fixture fx;
  Collector c(fx.backend, *fx.resolver, fx.clock, fx.prices(3.6), AgentOptions{});
  c.collect_once();
  gpu::DeviceSample lost;
  lost.state = gpu::DeviceState::lost;
  lost.error = "GPU_IS_LOST";
  fx.backend.samples[0] = lost;
  fx.clock.advance_ns(1'000'000'000);
  c.collect_once();
  const std::string text = exposition_text(c);
  EXPECT_NE(text.find("gpumeter_gpu_up{gpu=\"0\",uuid=\"GPU-0\",model=\"NVIDIA H100 80GB HBM3\"} 0\n"), std::string::npos);
  EXPECT_EQ(text.find("gpumeter_gpu_power_watts{"), std::string::npos);
  EXPECT_NEAR(metric_value(text, "gpumeter_gpu_unallocated_cost_usd_total{"), 0.001, 1e-12);
}

TEST(AgentCollector, BoundedOwnersGoToOther) {
  Fixture fx;
  AgentOptions o;
  o.max_owners = 2;
  Collector c(fx.backend, *fx.resolver, fx.clock, fx.prices(3.6), o);
  c.collect_once();
  fx.clock.advance_ns(1'000'000'000);
  c.collect_once();
  const Snapshot s = c.snapshot();
  EXPECT_EQ(s.owners.size(), 3u);  // two owners + other
  const DeviceView& d = s.devices[0];
  EXPECT_TRUE(d.owners.count(other_owner().key()));
  MicroUsd sum = 0;
  for (const auto& [k, oc] : d.owners) sum += oc.cost;
  EXPECT_EQ(sum + d.unallocated_cost, d.cost);
  EXPECT_NE(exposition_text(c).find("kind=\"other\",owner=\"other\""), std::string::npos);
}

// The node guard's view is the snapshot's figures without the copy: per-GPU utilization and processes, the
// node's cost, each owner's cost as owner_totals() sums it ("other" included), and every PID's owner as the
// collector resolved it.
TEST(AgentCollector, NodeViewIsTheSnapshotsOwnerTotalsAndProcesses) {
  Fixture fx(2);
  fx.backend.samples[1].utilization_pct = std::nullopt;
  AgentOptions o;
  o.max_owners = 2;
  Collector c(fx.backend, *fx.resolver, fx.clock, fx.prices(3.6), o);
  EXPECT_EQ(c.node_view().gpus.size(), 2u);
  EXPECT_FALSE(c.node_view().gpus[0].utilization_pct);  // nothing sampled yet
  for (int i = 0; i < 3; ++i) {
    c.collect_once();
    fx.clock.advance_ns(1'000'000'000);
  }
  const NodeView v = c.node_view();
  const Snapshot s = c.snapshot();
  ASSERT_EQ(v.gpus.size(), 2u);
  EXPECT_EQ(v.gpus[0].utilization_pct, 75.0);
  EXPECT_FALSE(v.gpus[1].utilization_pct);
  EXPECT_EQ(v.gpus[0].processes, 3u);
  EXPECT_EQ(v.node_cost, s.devices[0].cost + s.devices[1].cost);
  EXPECT_GT(v.node_cost, 0);
  std::map<std::string, MicroUsd> expected, got;
  for (const OwnerTotal& t : owner_totals(s)) expected[t.key] = t.cost;
  for (const auto& [owner, cost] : v.owner_costs) got[owner.key()] = cost;
  EXPECT_EQ(got, expected);
  EXPECT_TRUE(got.count(other_owner().key()));
  ASSERT_EQ(v.gpu_processes.size(), 6u);
  for (const auto& [pid, owner] : v.gpu_processes) {
    EXPECT_EQ(owner.key(), fx.resolver->resolve(pid).key()) << pid;
    if (pid == 200) {
      EXPECT_EQ(owner.slurm_job, "4242");
    }
  }
}

TEST(AgentCollector, EvictedOwnerTotalsMoveToOtherSoSumsStayExact) {
  Fixture fx;
  AgentOptions o;
  o.max_owners = 2;
  o.owner_expiry_ms = 1000;
  Collector c(fx.backend, *fx.resolver, fx.clock, fx.prices(3.6), o);
  // Only processes 100 and 200 at first: they take both owner slots.
  auto& procs = fx.backend.samples[0].processes;
  const auto all = procs;
  procs.erase(
      std::remove_if(procs.begin(), procs.end(), [](const gpu::ProcessSample& p) { return p.pid == 300; }),
      procs.end());
  c.collect_once();
  fx.clock.advance_ns(1'000'000'000);
  c.collect_once();
  // Then 100 leaves and 300 arrives after the expiry: 100's slot is freed for 300.
  procs.clear();
  for (const auto& p : all)
    if (p.pid != 100) procs.push_back(p);
  for (int i = 0; i < 3; ++i) {
    fx.clock.advance_ns(1'000'000'000);
    c.collect_once();
    const Snapshot s = c.snapshot();
    const DeviceView& d = s.devices[0];
    MicroUsd sum = 0;
    for (const auto& [k, oc] : d.owners) sum += oc.cost;
    EXPECT_EQ(sum + d.unallocated_cost, d.cost) << "interval " << i;
  }
}

// 2000 short Slurm jobs (2 s each, one after another, 4 users × 3 accounts): finished jobs leave the
// exposition after --slurm-job-expiry and fold into one slurm_finished series per user and account, so the
// number of owner series stays flat however many jobs ran; every device's sum stays exact throughout.
TEST(AgentCollector, FinishedSlurmJobsFoldIntoUserAndAccountTotals) {
  Fixture fx;
  AgentOptions o;
  o.max_owners = 100000;  // the fold alone bounds the series here, not the slot limit
  o.slurm_job_expiry_ms = 30000;
  Collector c(fx.backend, *fx.resolver, fx.clock, fx.prices(3.6), o);
  auto& procs = fx.backend.samples[0].processes;
  const int jobs = 2000;
  std::size_t most_series = 0;
  for (int j = 0; j < jobs; ++j) {
    const std::uint32_t pid = 10000 + static_cast<std::uint32_t>(j);
    test::write_fake_process(
        fx.proc, pid, "python3",
        "4:memory:/slurm/uid_" + std::to_string(j % 4) + "/job_" + std::to_string(j + 1) + "/step_0\n");
    write_file(fx.proc + "/" + std::to_string(pid) + "/environ",
               std::string("SLURM_JOB_ACCOUNT=acct") + std::to_string(j % 3) + '\0' + "SLURM_JOB_ID=" + std::to_string(j + 1) + '\0');
    procs = {{pid, 10ull << 30, 50}};
    for (int t = 0; t < 2; ++t) {
      fx.clock.advance_ns(1'000'000'000);
      c.collect_once();
    }
    if (j % 100 == 99) {
      const Snapshot s = c.snapshot();
      const DeviceView& d = s.devices[0];
      MicroUsd sum = 0;
      for (const auto& [k, oc] : d.owners) sum += oc.cost;
      ASSERT_EQ(sum + d.unallocated_cost, d.cost) << "after job " << j + 1;
      most_series = std::max(most_series, d.owners.size());
    }
  }
  const Snapshot s = c.snapshot();
  std::size_t live = 0, finished = 0;
  MicroUsd finished_cost = 0;
  for (const auto& [key, owner] : s.owners) {
    if (owner.kind == sys::OwnerKind::slurm_job) ++live;
    if (owner.kind == sys::OwnerKind::slurm_finished) {
      ++finished;
      finished_cost += s.devices[0].owners.at(key).cost;
      EXPECT_EQ(owner.name, owner.slurm_account + "/" + owner.user);
      EXPECT_EQ(owner.slurm_account.rfind("acct", 0), 0u);
    }
  }
  // Live: jobs seen in the last 30 s (2 s each): at most 16. Finished: 4 users × 3 accounts = 12 pairs
  // (j % 4, j % 3), all of them seen.
  EXPECT_LE(live, 16u);
  EXPECT_EQ(finished, 12u);
  EXPECT_LE(most_series, 16u + 12u + 3u);  // + the fixture's three non-Slurm owners (never sampled here)
  // 3.6 $/h = 1000 micro-dollars a second; every job had the whole GPU for 2 s.
  EXPECT_GE(finished_cost, static_cast<MicroUsd>(jobs - 16) * 2000);
  const std::string text = render_metrics(s);
  std::size_t series = 0;
  for (std::size_t p = 0; (p = text.find("\ngpumeter_owner_cost_usd_total{", p)) != std::string::npos; ++p) ++series;
  EXPECT_EQ(series, live + finished);
  EXPECT_NE(text.find(R"(kind="slurm_finished",owner="acct0/root",account="acct0",user="root"})"), std::string::npos) << text.substr(0, 2000);
}

TEST(AgentCollector, StateFileContinuesCounters) {
  Fixture fx;
  AgentOptions o;
  o.state_path = fx.dir.path() + "/agent.state";
  MicroUsd before = 0;
  {
    Collector c(fx.backend, *fx.resolver, fx.clock, fx.prices(3.6), o);
    ASSERT_TRUE(c.load_state());
    c.collect_once();
    fx.clock.advance_ns(5'000'000'000);
    c.collect_once();
    ASSERT_TRUE(c.save_state());
    before = c.snapshot().devices[0].cost;
  }
  EXPECT_EQ(before, 5000);
  EXPECT_FALSE(fs::exists(o.state_path + ".tmp"));
  EXPECT_EQ(fs::status(o.state_path).permissions() & fs::perms::others_read, fs::perms::none);
  Collector c(fx.backend, *fx.resolver, fx.clock, fx.prices(3.6), o);
  ASSERT_TRUE(c.load_state());
  c.collect_once();
  fx.clock.advance_ns(1'000'000'000);
  c.collect_once();
  const Snapshot s = c.snapshot();
  EXPECT_EQ(s.devices[0].cost, 6000);
  MicroUsd sum = 0;
  for (const auto& [k, oc] : s.devices[0].owners) sum += oc.cost;
  EXPECT_EQ(sum + s.devices[0].unallocated_cost, 6000);
  write_file(o.state_path, "{not json");
  Collector bad(fx.backend, *fx.resolver, fx.clock, fx.prices(3.6), o);
  const auto r = bad.load_state();
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find(o.state_path), std::string::npos);
}

TEST(AgentCollector, OwnersJson) {
  Fixture fx(2);
  Collector c(fx.backend, *fx.resolver, fx.clock, fx.prices(3.6), AgentOptions{});
  c.collect_once();
  fx.clock.advance_ns(1'000'000'000);
  c.collect_once();
  const auto j = nlohmann::json::parse(owners_json(c));
  ASSERT_EQ(j["devices"].size(), 2u);
  ASSERT_EQ(j["owners"].size(), 3u);
  EXPECT_EQ(j["owners"][0]["kind"], "container");
  EXPECT_EQ(j["owners"][0]["gpus"].size(), 2u);
  EXPECT_NEAR(j["owners"][0]["usd_per_hour"].get<double>(), 2 * 3.6 * 0.75, 0.01);
  EXPECT_TRUE(j["owners"][0]["slurm_job"].is_null());
}

TEST(AgentCollector, MigInstancesPricedBySlice) {
  Fixture fx;
  gpu::DeviceInfo& info = fx.backend.infos[0];
  info.mig_enabled = true;
  gpu::MigInstance a, b, c;
  a.uuid = "MIG-a", a.gpu_instance_id = 1, a.slice_count = 3, a.board_slices = 7;
  b.uuid = "MIG-b", b.gpu_instance_id = 2, b.slice_count = 4, b.board_slices = 7;
  c.uuid = "MIG-c", c.gpu_instance_id = 3, c.memory_total_bytes = 20ull << 30;  // no slice count: memory share
  info.mig_instances = {a, b, c};
  Collector col(fx.backend, *fx.resolver, fx.clock, fx.prices(7.0), AgentOptions{});
  col.collect_once();
  fx.clock.advance_ns(3'600'000'000'000);  // one hour
  col.collect_once();
  const Snapshot s = col.snapshot();
  ASSERT_EQ(s.devices[0].mig.size(), 3u);
  EXPECT_EQ(s.devices[0].mig[0].micros_per_hour, 3'000'000);
  EXPECT_EQ(s.devices[0].mig[1].micros_per_hour, 4'000'000);
  EXPECT_EQ(s.devices[0].mig[2].micros_per_hour, 1'750'000);  // 20 of 80 GiB
  EXPECT_EQ(s.devices[0].mig[0].cost + s.devices[0].mig[1].cost, s.devices[0].cost);
  const std::string text = render_metrics(s);
  EXPECT_NE(text.find("gpumeter_mig_price_usd_per_hour{gpu=\"0\",uuid=\"GPU-0\",model=\"NVIDIA H100 80GB HBM3\",mig_uuid=\"MIG-b\",gpu_instance=\"2\"} 4\n"),
            std::string::npos) << text;
  EXPECT_NE(text.find("gpumeter_mig_cost_usd_total{gpu=\"0\",uuid=\"GPU-0\",model=\"NVIDIA H100 80GB HBM3\",mig_uuid=\"MIG-a\",gpu_instance=\"1\"} 3\n"),
            std::string::npos);
}

TEST(AgentWebConfig, ParsesTlsAndUsers) {
  const auto cfg = parse_web_config(
      "# comment\ntls_server_config:\n  cert_file: server.crt\n  key_file: \"/etc/k.key\"\nbasic_auth_users:\n"
      "  alice: $2b$04$psC21kNK63cC3cuY4Vb60.tPCaryZtpMd5bvoO1Ae1B2hJEnSnWG6\n",
      "web.yml", "/etc/gm");
  ASSERT_TRUE(cfg) << cfg.error().message;
  EXPECT_EQ(cfg->cert_file, "/etc/gm/server.crt");
  EXPECT_EQ(cfg->key_file, "/etc/k.key");
  ASSERT_EQ(cfg->basic_auth_users.count("alice"), 1u);
  EXPECT_TRUE(verify_password("s3cret", cfg->basic_auth_users.at("alice")));
  EXPECT_FALSE(verify_password("wrong", cfg->basic_auth_users.at("alice")));
  EXPECT_FALSE(verify_password("s3cret", "$2b$04$garbage"));
}

TEST(AgentWebConfig, ErrorsNameTheLine) {
  const auto r = parse_web_config("tls_server_config:\n  cert_file: a\n  client_ca_file: x\n", "web.yml", ".");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("web.yml:3"), std::string::npos) << r.error().message;
  EXPECT_FALSE(parse_web_config("basic_auth_users:\n  bob: plaintext\n", "w", "."));
  EXPECT_FALSE(parse_web_config("tls_server_config:\n  cert_file: a\n", "w", "."));
  EXPECT_FALSE(parse_web_config("listen: 1\n", "w", "."));
}

TEST(AgentListen, ParsesAddresses) {
  auto a = parse_listen(":9999");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 9999);
  auto b = parse_listen("[::1]:80");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->host, "::1");
  EXPECT_FALSE(parse_listen("localhost"));
  EXPECT_FALSE(parse_listen("0.0.0.0:99999"));
  EXPECT_FALSE(parse_listen("0.0.0.0:12x"));
}

}  // namespace
}  // namespace gm::agent
