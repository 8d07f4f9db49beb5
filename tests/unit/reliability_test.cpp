// Regression tests for what the fuzzers and fault tests found (docs/reliability.md): each bad input is an
// error with a message, never a crash or a wrong number.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <string>
#include <vector>

#include "agent/agent.h"
#include "catalog/catalog.h"
#include "kubelet/pod_resources.h"
#include "meter/meter.h"
#include "report/fleet.h"
#include "store/store.h"
#include "support/support.h"
#include "util/units.h"

namespace gm {
namespace {

Result<report::FleetReport> fleet_with(const std::vector<std::string>& answers) {
  std::size_t i = 0;
  return report::fleet_report_from(
      [&](const std::string&) -> Result<report::PrometheusAnswer> {
        return report::PrometheusAnswer{200, answers[std::min(i++, answers.size() - 1)]};
      },
      "http://prom:9090", 3'600'000, "namespace");
}

const std::string kSum =
    R"({"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1795464168.243,"802"]}]}})";

TEST(ReliabilityTest, PrometheusAnswersThatAreNotVectorsOfFiniteNumbersAreErrors) {
  const std::string ns =
      R"({"status":"success","data":{"resultType":"vector","result":[{"metric":{"namespace":"ml"},"value":[1,"2.5"]}]}})";
  auto ok = fleet_with({kSum, kSum, kSum, kSum, ns});
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_DOUBLE_EQ(ok->device_cost_usd, 802);
  ASSERT_EQ(ok->rows.size(), 1u);
  EXPECT_DOUBLE_EQ(ok->rows[0].cost_usd, 2.5);
  struct Case {
    std::string answer, needle;
  };
  const std::vector<Case> cases = {
      {"[]", "not a Prometheus API answer"},
      {"\"x\"", "not a Prometheus API answer"},
      {"<html>502</html>", "not a Prometheus API answer"},
      {R"({"status":"error","error":7})", "failed: ?"},
      {R"({"status":"error","errorType":"bad_data","error":"parse error"})", "parse error"},
      {R"({"status":"success","data":{"resultType":"scalar","result":[1,"1"]}})", "resultType"},
      {R"({"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"+Inf"]}]}})",
       "'+Inf'"},
      {R"({"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"NaN"]}]}})",
       "'NaN'"},
      {R"({"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"12abc"]}]}})",
       "'12abc'"},
      {R"({"status":"success","data":{"resultType":"vector","result":[{"metric":{"a":1},"value":[1,"1"]}]}})",
       "unexpected"},
  };
  for (const auto& c : cases) {
    auto r = fleet_with({c.answer});
    ASSERT_FALSE(r) << c.answer;
    EXPECT_NE(r.error().message.find(c.needle), std::string::npos) << c.answer << " -> " << r.error().message;
  }
}

TEST(ReliabilityTest, PricesBeyondAnyRealOfferAreRejectedNotOverflowed) {
  meter::PricingOptions o;
  auto catalog = catalog::Catalog::builtin();
  ASSERT_TRUE(catalog);
  for (double p : {1e15, 1e300, std::nan(""), 0.0, -1.0}) {
    o.price_usd_per_gpu_hour = p;
    auto q = meter::resolve_price(o, *catalog, std::nullopt, nullptr);
    EXPECT_FALSE(q) << p;
  }
  o.price_usd_per_gpu_hour = catalog::kMaxUsdPerGpuHour;
  auto q = meter::resolve_price(o, *catalog, std::nullopt, nullptr);
  ASSERT_TRUE(q);
  EXPECT_GT(meter::billed_cost(*q, 365 * 86'400, 8), 0);

  test::TempDir dir;
  auto c = *catalog;
  const std::string csv = dir.write("o.csv",
                                    "provider,region,instance,gpu,gpu_count,ondemand_usd_per_hour\n"
                                    "me,r,big,H100 SXM 80GB,8,1e300\n");
  auto merged = c.merge_offers_file(csv);
  ASSERT_FALSE(merged);
  EXPECT_NE(merged.error().message.find("o.csv:2"), std::string::npos) << merged.error().message;
  const std::string tiny = dir.write("t.csv",
                                     "provider,region,instance,gpu,gpu_count,ondemand_usd_per_hour\n"
                                     "me,r,sliver,H100 SXM 80GB,1e-12,2\n");
  EXPECT_FALSE(c.merge_offers_file(tiny));
  const std::string host = dir.write("h.csv",
                                     "provider,region,instance,gpu,gpu_count,ondemand_usd_per_hour,kind\n"
                                     "me,r,vm,,0,0.7,host_vm\n");
  EXPECT_TRUE(c.merge_offers_file(host));
}

TEST(ReliabilityTest, DurationsNeverOverflowOrReadHalfANumber) {
  EXPECT_EQ(*util::parse_duration_ms("1h30m"), 5'400'000);
  EXPECT_EQ(*util::parse_duration_ms("1.5s"), 1'500);
  for (const char* bad : {"99999999999999999999d", "1.2.3s", ".", "..s", "1e400", "36501d"})
    EXPECT_FALSE(util::parse_duration_ms(bad)) << bad;
  EXPECT_TRUE(util::parse_duration_ms("36500d"));
}

TEST(ReliabilityTest, PodResourcesAnswerThatIsNotAMessageIsAnError) {
  EXPECT_TRUE(kubelet::parse_pod_resources_response(""));
  EXPECT_TRUE(kubelet::parse_pod_resources_response("")->empty());
  EXPECT_FALSE(kubelet::parse_pod_resources_response("\xff\xff\xff\xff"));
  // pod_resources { name: "p" namespace: "n" containers { name: "c" devices { resource_name: "r" device_ids:
  // "GPU-1" } } }
  const std::string wire(
      "\x0a\x17\x0a\x01p\x12\x01n\x1a\x0f\x0a\x01"
      "c\x12\x0a\x0a\x01r\x12\x05GPU-1",
      25);
  auto a = kubelet::parse_pod_resources_response(wire);
  ASSERT_TRUE(a) << a.error().message;
  ASSERT_EQ(a->size(), 1u);
  EXPECT_EQ((*a)[0], (kubelet::PodDeviceAssignment{"n", "p", "c", "r", "GPU-1"}));
}

store::RunRecord dead_meter_run() {
  store::RunRecord r;
  r.command = "python3 train.py";
  r.user = "u";
  r.host = "h";
  r.start_unix_ms = 1'790'000'000'000;
  r.price_micros_per_gpu_hour = 3'600'000'000;
  r.billing_granularity_s = 1;
  r.gpus_allocated = {"GPU-1"};
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, nullptr, 0);
  r.meter_pid = pid;  // gone
  return r;
}

TEST(ReliabilityTest, InterruptedRunCountsEveryCommittedSecond) {
  test::TempDir dir;
  auto ledger = store::Ledger::open(dir.path() + "/l.db");
  ASSERT_TRUE(ledger);
  store::RunRecord run = dead_meter_run();
  auto id = (*ledger)->begin_run(run);
  ASSERT_TRUE(id);
  run.id = *id;
  std::vector<store::SampleRecord> samples;
  for (int s = 1; s <= 3; ++s) {
    store::SampleRecord x;
    x.run_id = *id;
    x.t_ms = s * 1000;
    x.gpu_uuid = "GPU-1";
    x.cost_micros = 1'000'000;
    x.energy_j = 10;
    samples.push_back(x);
  }
  // Totals refreshed after the second second; killed after committing the third second's sample.
  ASSERT_TRUE((*ledger)->append({samples[0], samples[1]}, {}, {}));
  run.wall_ms = 2000;
  run.billed_s = 2;
  run.cost_micros = 2'000'000;
  run.energy_j = 20;
  ASSERT_TRUE((*ledger)->update_run(run));
  ASSERT_TRUE((*ledger)->append({samples[2]}, {}, {}));
  // Read back through a fresh connection, as `gpumeter runs` would.
  ledger->reset();
  auto again = store::Ledger::open(dir.path() + "/l.db");
  ASSERT_TRUE(again);
  auto r = (*again)->run(*id);
  ASSERT_TRUE(r);
  if (r->status == store::RunStatus::interrupted) {
    EXPECT_EQ(r->wall_ms, 3000);
    EXPECT_EQ(r->billed_s, 3);
    EXPECT_EQ(r->cost_micros, 3'000'000);
    EXPECT_DOUBLE_EQ(r->energy_j, 30);
  } else {
    ADD_FAILURE() << "status " << util::text_of(r->status);
  }
}

}  // namespace
}  // namespace gm
