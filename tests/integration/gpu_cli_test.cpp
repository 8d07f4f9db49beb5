// gpumeter gpus / doctor run as a real binary against the fake NVML library.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "catalog/catalog.h"
#include "gpu/gpu.h"
#include "support/support.h"
#include "util/exit_codes.h"

namespace gm {
namespace {

using nlohmann::json;

std::string two_gpus() { return test::read_file(test::source_dir() + "/tests/data/gpu/two_gpus.json"); }

struct Fixture {
  test::TempDir dir;
  std::string scenario;
  explicit Fixture(const std::string& text) { scenario = dir.write("scenario.json", text); }
  test::CmdResult run(const std::vector<std::string>& args) { return test::run_gpumeter(args, test::fake_env(scenario, dir.path())); }
};

TEST(GpuCliIntegrationTest, GpusJsonReportsBothScenarioDevices) {
  Fixture f(two_gpus());
  auto r = f.run({"gpus", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["driver_version"], "580.95.05");
  ASSERT_EQ(j["devices"].size(), 2U);
  const json& h100 = j["devices"][0];
  EXPECT_EQ(h100["index"], 0);
  EXPECT_EQ(h100["name"], "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(h100["uuid"], "GPU-0d3c1111-2222-3333-4444-555566667777");
  EXPECT_EQ(h100["memory_total_bytes"], 81559ULL << 20);
  EXPECT_EQ(h100["memory_used_bytes"], 61000ULL << 20);
  EXPECT_EQ(h100["utilization_pct"], 97);
  EXPECT_DOUBLE_EQ(h100["power_w"].get<double>(), 650.0);
  EXPECT_EQ(h100["temperature_c"], 71);
  EXPECT_EQ(h100["state"], "ok");
  EXPECT_EQ(h100["energy_method"], "counter");
  ASSERT_TRUE(h100["energy_j"].is_number());
  EXPECT_LE(h100["energy_j"].get<double>(), 650.0 * 30);  // counter since nvmlInit, well under 30 s
  ASSERT_EQ(h100["processes"].size(), 1U);
  EXPECT_EQ(h100["processes"][0]["pid"], 1);
  EXPECT_EQ(h100["processes"][0]["memory_bytes"], 60500ULL << 20);
  EXPECT_EQ(h100["processes"][0]["sm_util_pct"], 97);
  EXPECT_TRUE(h100["processes"][0].contains("name"));
  const json& a100 = j["devices"][1];
  EXPECT_EQ(a100["name"], "NVIDIA A100-SXM4-40GB");
  EXPECT_EQ(a100["memory_used_bytes"], 1024ULL << 20);
  EXPECT_EQ(a100["utilization_pct"], 12);
  EXPECT_DOUBLE_EQ(a100["power_w"].get<double>(), 90.0);
  EXPECT_EQ(a100["processes"].size(), 0U);
  for (const char* key : {"index", "name", "uuid", "catalog_gpu", "memory_total_bytes", "memory_used_bytes",
                          "utilization_pct", "power_w", "energy_j", "energy_method", "temperature_c", "state",
                          "price_usd_per_hour", "price_source", "processes"}) {
    EXPECT_TRUE(a100.contains(key)) << key;
  }
}

TEST(GpuCliIntegrationTest, MissingValuesAreNullNeverZero) {
  Fixture f(R"({"devices": [{"name": "NVIDIA L4", "timeline": [{"t": 0, "util": 3}]}]})");
  auto r = f.run({"gpus", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json d = json::parse(r.out)["devices"][0];
  EXPECT_TRUE(json::parse(r.out)["driver_version"].is_null());
  EXPECT_EQ(d["utilization_pct"], 3);
  for (const char* key : {"memory_total_bytes", "memory_used_bytes", "power_w", "temperature_c", "energy_j"}) {
    EXPECT_TRUE(d[key].is_null()) << key;
  }
  EXPECT_EQ(d["energy_method"], "none");
}

TEST(GpuCliIntegrationTest, MissingEnergySymbolMeansPowerIntegration) {
  std::string text = two_gpus();
  text.replace(text.find('{'), 1, R"({"missing_symbols": ["nvmlDeviceGetTotalEnergyConsumption"], )");
  Fixture f(text);
  auto r = f.run({"gpus", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out);
  for (const auto& d : j["devices"]) {
    EXPECT_EQ(d["energy_method"], "power_integration");
    EXPECT_TRUE(d["energy_j"].is_null());  // a one-shot reading has no interval to integrate over
    EXPECT_TRUE(d["power_w"].is_number());
  }
  auto doc = f.run({"doctor"});
  ASSERT_EQ(doc.exit_code, 0) << doc.err;
  EXPECT_NE(doc.out.find("energy method   power_integration"), std::string::npos) << doc.out;
  EXPECT_NE(doc.out.find("nvmlDeviceGetTotalEnergyConsumption"), std::string::npos) << doc.out;
}

TEST(GpuCliIntegrationTest, LostDeviceLeavesTheOtherReported) {
  std::string text = two_gpus();
  auto at = text.find(R"("timeline")", text.find("A100"));
  text.insert(at, R"("faults": [{"t": 0, "function": "*", "return": "GPU_IS_LOST"}], )");
  Fixture f(text);
  auto r = f.run({"gpus", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out);
  ASSERT_EQ(j["devices"].size(), 2U);
  EXPECT_EQ(j["devices"][0]["state"], "ok");
  EXPECT_EQ(j["devices"][0]["utilization_pct"], 97);
  EXPECT_EQ(j["devices"][1]["state"], "lost");
  EXPECT_TRUE(j["devices"][1]["utilization_pct"].is_null());
  auto table = f.run({"gpus"});
  EXPECT_EQ(table.exit_code, 0);
  EXPECT_NE(table.out.find("lost"), std::string::npos);
}

TEST(GpuCliIntegrationTest, HungCallDoesNotOutlastTheDocumentedBound) {
  std::string text = two_gpus();
  auto at = text.find(R"("timeline")");
  text.insert(at, R"("faults": [{"t": 0, "function": "nvmlDeviceGetPowerUsage", "hang_ms": 5000}], )");
  Fixture f(text);
  auto r = f.run({"gpus", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // One device hangs once: at most one call bound, plus start-up margin; far below the 5 s hang.
  EXPECT_LT(r.wall_s, static_cast<double>(gpu::kGpuCallTimeoutMs) / 1000.0 + 1.5);
  json j = json::parse(r.out);
  EXPECT_EQ(j["devices"][0]["state"], "unresponsive");
  EXPECT_EQ(j["devices"][1]["state"], "ok");
  EXPECT_EQ(j["devices"][1]["utilization_pct"], 12);
  auto doc = f.run({"doctor"});
  EXPECT_EQ(doc.exit_code, 0);
  EXPECT_LT(doc.wall_s, static_cast<double>(gpu::kGpuCallTimeoutMs) / 1000.0 + 1.5);
  EXPECT_NE(doc.out.find("unresponsive"), std::string::npos);
}

TEST(GpuCliIntegrationTest, NoNvmlGivesTheDlopenReasonAndExitCode3) {
  test::TempDir dir;
  auto env = test::fake_env(dir.path() + "/none.json", dir.path());
  env["GPUMETER_NVML_LIBRARY"] = dir.path() + "/libnvidia-ml.so.1";
  for (const char* cmd : {"gpus", "doctor"}) {
    auto r = test::run_gpumeter({cmd}, env);
    EXPECT_EQ(r.exit_code, util::kExitNoGpuLibrary) << cmd;
    EXPECT_NE(r.err.find("NVML could not be loaded"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(dir.path() + "/libnvidia-ml.so.1: cannot open shared object file"), std::string::npos) << r.err;
  }
  auto doc = test::run_gpumeter({"doctor"}, env);
  EXPECT_NE(doc.out.find("NVML             NOT AVAILABLE"), std::string::npos) << doc.out;
  EXPECT_NE(doc.out.find("newest price"), std::string::npos) << doc.out;  // still checks the rest
  auto json_run = test::run_gpumeter({"gpus", "--json"}, env);
  EXPECT_EQ(json_run.exit_code, util::kExitNoGpuLibrary);
}

TEST(GpuCliIntegrationTest, MalformedScenarioNamesTheFile) {
  Fixture f(R"({"devices": [{"name": "x", "timeline": [{"t": 0, "util": "high"}]}]})");
  for (const char* cmd : {"gpus", "doctor"}) {
    auto r = f.run({cmd});
    EXPECT_EQ(r.exit_code, util::kExitNoGpuLibrary) << cmd;
    EXPECT_NE(r.err.find(f.scenario), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("devices[0].timeline[0]: \"util\" must be a number"), std::string::npos) << r.err;
  }
}

TEST(GpuCliIntegrationTest, UnknownFlagIsAUsageError) {
  Fixture f(two_gpus());
  auto r = f.run({"gpus", "--bogus"});
  EXPECT_EQ(r.exit_code, util::kExitUsage);
  EXPECT_NE(r.err.find("--bogus"), std::string::npos);
}

TEST(GpuCliIntegrationTest, DoctorListsCapabilitiesAndMig) {
  Fixture f(R"({"driver_version": "535.104.05", "devices": [{"name": "NVIDIA A100-SXM4-80GB", "mig": true,
      "mig_instances": [{"uuid": "MIG-x", "gpu_instance_id": 3, "memory_total_mib": 9856, "mem_used_mib": 1}],
      "timeline": [{"t": 0, "util": 1, "power_w": 60}],
      "faults": [{"function": "nvmlDeviceGetRunningProcessDetailList", "return": "NO_PERMISSION"}]}]})");
  auto r = f.run({"doctor"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("driver version   535.104.05"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("MIG             enabled, 1 instance(s)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("MIG-x"), std::string::npos);
  EXPECT_NE(r.out.find("NO_PERMISSION"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("energy counter  yes"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("process SM util no"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("not available from NVML in MIG mode"), std::string::npos) << r.out;
}

TEST(GpuCliIntegrationTest, CatalogGpuAndPriceForEachDevice) {
  auto catalog = catalog::Catalog::builtin();
  ASSERT_TRUE(catalog.ok()) << catalog.error().message;
  Fixture f(two_gpus());
  auto r = f.run({"gpus", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["devices"][0]["catalog_gpu"], "H100 SXM 80GB");
  EXPECT_EQ(j["devices"][1]["catalog_gpu"], "A100 SXM 40GB");
  for (std::size_t i = 0; i < 2; ++i) {
    const json& d = j["devices"][i];
    auto ref = catalog->reference_price(d["catalog_gpu"].get<std::string>());
    ASSERT_TRUE(ref.has_value());
    ASSERT_TRUE(d["price_usd_per_hour"].is_number()) << d.dump();
    EXPECT_NEAR(d["price_usd_per_hour"].get<double>(), ref->usd_per_gpu_hour, 1e-6);
    EXPECT_TRUE(d["price_source"].is_string());
  }
  auto flagged = f.run({"gpus", "--json", "--price", "2.5"});
  ASSERT_EQ(flagged.exit_code, 0) << flagged.err;
  json k = json::parse(flagged.out);
  EXPECT_DOUBLE_EQ(k["devices"][1]["price_usd_per_hour"].get<double>(), 2.5);
  EXPECT_NE(k["devices"][1]["price_source"].get<std::string>().find("--price"), std::string::npos);
  auto bad_offer = f.run({"gpus", "--offer", "nosuch:instance"});
  EXPECT_NE(bad_offer.exit_code, 0);
  EXPECT_NE(bad_offer.err.find("nosuch:instance"), std::string::npos) << bad_offer.err;
  auto doc = f.run({"doctor"});
  EXPECT_NE(doc.out.find("newest price " + catalog->newest_price_date()), std::string::npos) << doc.out;
}

}  // namespace
}  // namespace gm
