// `gpumeter prices update` against a loopback stand-in (tests/support/price_standin.py) serving
// recorded-format answers built from the providers' documented formats (tests/data/prices), then `prices
// --json` over the fetched catalog; failures leave the catalog byte for byte.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "agent_fixture.h"
#include "support/support.h"

namespace gm::test {
namespace {

std::string today_utc() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
  return buf;
}

class PricesUpdateIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data_ = dir_.path() + "/standin";
    std::filesystem::copy(source_dir() + "/tests/data/prices", data_);
    const std::string port_file = dir_.path() + "/port";
    standin_ = std::make_unique<Background>(
        std::vector<std::string>{"python3", source_dir() + "/tests/support/price_standin.py", data_,
                                 port_file},
        std::map<std::string, std::string>{}, dir_.path(), "standin");
    for (int i = 0; i < 400 && read_file(port_file).empty(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    ASSERT_FALSE(read_file(port_file).empty()) << read_file(dir_.path() + "/standin.err");
    base_ = "http://127.0.0.1:" + read_file(port_file);
    env_ = {{"GPUMETER_DATA_DIR", dir_.path() + "/data"},
            {"XDG_CONFIG_HOME", dir_.path() + "/config"},
            {"HOME", dir_.path()},
            {"GPUMETER_GCP_API_KEY", "\x01unset"},
            {"LAMBDA_API_KEY", "\x01unset"}};
    catalog_ = dir_.path() + "/data/offers.csv";
  }

  CmdResult update(std::vector<std::string> args, std::map<std::string, std::string> extra = {}) {
    args.insert(args.begin(), {"prices", "update"});
    auto env = env_;
    for (auto& [k, v] : extra) env[k] = v;
    return run_gpumeter(args, env, std::nullopt, 60);
  }

  nlohmann::json offers() {
    auto r = run_gpumeter({"prices", "--all-regions", "--json"}, env_);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out)["offers"];
  }

  static const nlohmann::json* find(const nlohmann::json& offers, const std::string& region,
                                    const std::string& instance) {
    for (const auto& o : offers)
      if (o["region"] == region && o["instance"] == instance) return &o;
    return nullptr;
  }

  TempDir dir_;
  std::string data_, base_, catalog_;
  std::map<std::string, std::string> env_;
  std::unique_ptr<Background> standin_;
};

TEST_F(PricesUpdateIntegrationTest, RecordedFormatsAzureAndAwsGivePerGpuPricesDatedToday) {
  auto az = update({"--provider", "azure", "--region", "eastus", "--endpoint", base_, "--json"});
  ASSERT_EQ(az.exit_code, 0) << az.err << az.out;
  auto report = nlohmann::json::parse(az.out);
  EXPECT_EQ(report["written"], true);
  EXPECT_EQ(report["providers"][0]["requests"].size(), 2u) << "NextPageLink followed to the second page";
  EXPECT_EQ(report["unknown_instances"], nlohmann::json::array({"azure eastus Standard_NC8ads_A10_v4"}));
  std::map<std::string, std::string> verdicts;
  for (const auto& o : report["offers"]) verdicts[o["instance"]] = o["verdict"];
  EXPECT_EQ(verdicts["Standard_NC40ads_H100_v5"], "refused");  // a $0 row
  EXPECT_EQ(verdicts["Standard_ND96asr_v4"], "refused");       // a non-numeric price
  EXPECT_EQ(verdicts["Standard_NC48ads_A100_v4"], "flagged");  // spot above on-demand

  auto aws = update({"--provider", "aws", "--region", "us-east-1", "--endpoint", base_});
  ASSERT_EQ(aws.exit_code, 0) << aws.err << aws.out;
  EXPECT_NE(aws.out.find("g7e.2xlarge"), std::string::npos) << "unknown GPU type listed: " << aws.out;
  EXPECT_NE(aws.out.find("refused"), std::string::npos) << aws.out;

  const auto all = offers();
  const std::string today = today_utc();
  const auto* nc24 = find(all, "eastus", "Standard_NC24ads_A100_v4");
  ASSERT_NE(nc24, nullptr);
  EXPECT_EQ((*nc24)["ondemand_usd_per_hour"], 3.52);
  EXPECT_EQ((*nc24)["spot_usd_per_hour"], 0.5876);
  EXPECT_EQ((*nc24)["usd_per_gpu_hour"], 3.52);
  EXPECT_EQ((*nc24)["date"], today);
  EXPECT_EQ((*nc24)["fetched_at"].get<std::string>().substr(0, 10), today);
  EXPECT_NE((*nc24)["source"].get<std::string>().find("azure-retail-prices"), std::string::npos);
  const auto* nd = find(all, "eastus", "Standard_ND96isr_H100_v5");
  ASSERT_NE(nd, nullptr);
  EXPECT_EQ((*nd)["gpu_count"], 8);
  EXPECT_DOUBLE_EQ((*nd)["usd_per_gpu_hour"].get<double>(), 98.32 / 8);
  EXPECT_EQ((*nd)["spot_usd_per_hour"], 54.08);
  EXPECT_EQ((*nd)["date"], today);
  const auto* p5 = find(all, "us-east-1", "p5.48xlarge");
  ASSERT_NE(p5, nullptr);
  EXPECT_EQ((*p5)["ondemand_usd_per_hour"], 31.464);
  EXPECT_DOUBLE_EQ((*p5)["usd_per_gpu_hour"].get<double>(), 31.464 / 8);
  EXPECT_EQ((*p5)["date"], today);
  EXPECT_NE((*p5)["source"].get<std::string>().find("spot kept from"), std::string::npos);
  // Rows of other regions keep their built-in prices and dates.
  const auto* p5_west = find(all, "us-west-2", "p5.48xlarge");
  ASSERT_NE(p5_west, nullptr);
  EXPECT_EQ((*p5_west)["date"], "2026-11-21");
  EXPECT_TRUE((*p5_west)["fetched_at"].is_null());
  // The filtered rows (Windows, Low Priority, DevTest, Reservation, RHEL, Reserved, Dedicated, capacity
  // reservations, SQL) and the refused ones never leak in.
  for (const auto& o : all) {
    for (double leaked : {4.4111, 0.9222, 0.3333, 2.2222, 17444.0, 102.7362, 19.6644, 66.6666, 36.984, 31.608,
                          20.1234, 34.6104, 31.9999, 41.1111}) {
      EXPECT_NE(o["ondemand_usd_per_hour"], leaked) << o.dump();
      EXPECT_NE(o["spot_usd_per_hour"], leaked) << o.dump();
    }
    EXPECT_NE(o["instance"], "Standard_NC8ads_A10_v4");
    EXPECT_NE(o["instance"], "g7e.2xlarge");
    if (o["instance"] == "Standard_NC40ads_H100_v5" || o["instance"] == "g5.2xlarge") {
      EXPECT_NE(o["ondemand_usd_per_hour"], 0.0) << "the $0 row was refused: the built-in price stays";
    }
  }
  // `run` prices with the fetched offer.
  auto run = run_gpumeter(
      {"run", "--offer", "aws:p5.48xlarge@us-east-1", "--json-report", dir_.path() + "/r.json", "--", "true"},
      env_);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto rep = nlohmann::json::parse(read_file(dir_.path() + "/r.json"));
  EXPECT_NE(rep.dump().find("3.933"), std::string::npos) << rep.dump();
}

TEST_F(PricesUpdateIntegrationTest, TruncatedPageCutTransferHttpErrorAndDeadEndpointKeepTheCatalog) {
  ASSERT_EQ(update({"--provider", "azure", "--region", "eastus", "--endpoint", base_}).exit_code, 0);
  const std::string before = read_file(catalog_);
  ASSERT_FALSE(before.empty());
  const auto same = [&](const CmdResult& r, const char* what) {
    EXPECT_NE(r.exit_code, 0) << what << ": " << r.out;
    EXPECT_NE(r.err.find("left as it was"), std::string::npos) << what << ": " << r.err;
    EXPECT_EQ(read_file(catalog_), before) << what;
    for (const auto& e : std::filesystem::directory_iterator(dir_.path() + "/data"))
      EXPECT_EQ(e.path().filename(), "offers.csv") << "no temporary file left behind";
  };
  // A truncated page (a JSON document cut in half).
  const std::string page2 = read_file(data_ + "/azure-eastus-100.json");
  { std::ofstream(data_ + "/azure-eastus-100.json") << page2.substr(0, page2.size() / 2); }
  auto truncated =
      update({"--provider", "azure", "--region", "eastus", "--endpoint", base_, "--accept-changes"});
  same(truncated, "truncated page");
  EXPECT_NE(truncated.err.find("truncated"), std::string::npos) << truncated.err;
  // A transfer cut short (Content-Length says more than arrives).
  { std::ofstream(data_ + "/azure-eastus-100.json") << page2; }
  { std::ofstream(data_ + "/azure-eastus-100.json.cut") << ""; }
  same(update({"--provider", "azure", "--region", "eastus", "--endpoint", base_}), "cut transfer");
  std::filesystem::remove(data_ + "/azure-eastus-100.json.cut");
  // An AWS CSV cut at a row boundary's middle.
  const std::string csv = read_file(data_ + "/aws-us-east-1.csv");
  { std::ofstream(data_ + "/aws-us-east-1.csv") << csv.substr(0, csv.size() - 25); }
  same(update({"--provider", "aws", "--region", "us-east-1", "--endpoint", base_}), "truncated csv");
  // HTTP 404 (no price list for that region).
  same(update({"--provider", "aws", "--region", "xx-nowhere-1", "--endpoint", base_}), "http 404");
  // A dead endpoint: a port nothing listens on.
  int dead_port = 0;
  {
    TempDir unused;
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    dead_port = ntohs(a.sin_port);
    ::close(fd);
  }
  auto dead = update({"--provider", "azure", "--region", "eastus", "--endpoint",
                      "http://127.0.0.1:" + std::to_string(dead_port)});
  same(dead, "dead endpoint");
  EXPECT_EQ(dead.exit_code, 5) << dead.err;
}

TEST_F(PricesUpdateIntegrationTest, HeldBackUntilAcceptedAndDryRunWritesNothing) {
  ASSERT_EQ(update({"--provider", "azure", "--region", "eastus", "--endpoint", base_}).exit_code, 0);
  // The provider's NC24ads price doubles.
  std::string page1 = read_file(data_ + "/azure-eastus-0.json");
  const auto at = page1.find("\"retailPrice\": 3.52");
  ASSERT_NE(at, std::string::npos);
  page1.replace(at, 19, "\"retailPrice\": 7.04");
  { std::ofstream(data_ + "/azure-eastus-0.json") << page1; }
  const std::string before = read_file(catalog_);
  auto dry = update(
      {"--provider", "azure", "--region", "eastus", "--endpoint", base_, "--dry-run", "--accept-changes"});
  ASSERT_EQ(dry.exit_code, 0) << dry.err;
  EXPECT_NE(dry.out.find("Dry run"), std::string::npos) << dry.out;
  EXPECT_EQ(read_file(catalog_), before);
  auto held = update({"--provider", "azure", "--region", "eastus", "--endpoint", base_});
  ASSERT_EQ(held.exit_code, 0) << held.err;
  EXPECT_NE(held.out.find("held_back"), std::string::npos) << held.out;
  EXPECT_NE(held.out.find("--accept-changes"), std::string::npos) << held.out;
  EXPECT_EQ((*find(offers(), "eastus", "Standard_NC24ads_A100_v4"))["ondemand_usd_per_hour"], 3.52);
  auto accepted =
      update({"--provider", "azure", "--region", "eastus", "--endpoint", base_, "--accept-changes"});
  ASSERT_EQ(accepted.exit_code, 0) << accepted.err;
  EXPECT_EQ((*find(offers(), "eastus", "Standard_NC24ads_A100_v4"))["ondemand_usd_per_hour"], 7.04);
}

TEST_F(PricesUpdateIntegrationTest, RecordedFormatsGcpUnitsNanosAndLambdaWithKeys) {
  auto no_key = update({"--provider", "gcp", "--endpoint", base_});
  EXPECT_EQ(no_key.exit_code, 2);
  EXPECT_NE(no_key.err.find("GPUMETER_GCP_API_KEY"), std::string::npos) << no_key.err;
  auto r =
      update({"--provider", "gcp,lambda", "--region", "us-central1,us-east-1", "--endpoint", base_, "--json"},
             {{"GPUMETER_GCP_API_KEY", "test-key"}, {"LAMBDA_API_KEY", "lambda-key"}});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  const auto report = nlohmann::json::parse(r.out);
  EXPECT_EQ(report["providers"][0]["requests"].size(), 2u) << "nextPageToken followed";
  EXPECT_EQ(r.out.find("test-key"), std::string::npos) << "keys never reported";
  const auto all = offers();
  const auto* a3 = find(all, "us-central1", "a3-highgpu-1g");
  ASSERT_NE(a3, nullptr);
  EXPECT_EQ((*a3)["ondemand_usd_per_hour"], 5.682526);
  EXPECT_EQ((*a3)["spot_usd_per_hour"], 2.944522);
  EXPECT_EQ((*a3)["date"], today_utc());
  const auto* lam = find(all, "us-east-1", "gpu_8x_h100_sxm5");
  ASSERT_NE(lam, nullptr);
  EXPECT_EQ((*lam)["ondemand_usd_per_hour"], 23.92);
  EXPECT_DOUBLE_EQ((*lam)["usd_per_gpu_hour"].get<double>(), 2.99);
  bool mi300 = false;
  for (const auto& u : report["unknown_instances"]) mi300 = mi300 || u == "lambda * gpu_1x_mi300x";
  EXPECT_TRUE(mi300) << report["unknown_instances"].dump();
}

TEST_F(PricesUpdateIntegrationTest, YourRatesSideBySideAndDoctorShowsCatalogAgePerProvider) {
  ASSERT_EQ(update({"--provider", "aws", "--region", "us-east-1", "--endpoint", base_}).exit_code, 0);
  const std::string cfg = dir_.write(
      "config.toml", "[pricing.aws]\ndiscount = \"30%\"\n[pricing.aws.committed]\n\"g6.xlarge\" = 0.5\n");
  auto text = run_gpumeter({"prices", "--provider", "aws", "--region", "us-east-1", "--config", cfg}, env_);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("YOUR $/GPU-H"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("(fetched)"), std::string::npos) << text.out;
  auto json =
      run_gpumeter({"prices", "--provider", "aws", "--region", "us-east-1", "--config", cfg, "--json"}, env_);
  ASSERT_EQ(json.exit_code, 0) << json.err;
  for (const auto& o : nlohmann::json::parse(json.out)["offers"]) {
    if (o["instance"] == "p5.48xlarge") {
      EXPECT_DOUBLE_EQ(o["usd_per_gpu_hour"].get<double>(), 3.933);
      EXPECT_DOUBLE_EQ(o["your_usd_per_gpu_hour"].get<double>(), 2.7531);
    }
    if (o["instance"] == "g6.xlarge") {
      EXPECT_DOUBLE_EQ(o["your_usd_per_gpu_hour"].get<double>(), 0.5);
    }
  }
  auto doctor = run_gpumeter({"doctor"}, env_);
  EXPECT_NE(doctor.out.find("fetched prices " + catalog_), std::string::npos) << doctor.out;
  EXPECT_NE(doctor.out.find("aws"), std::string::npos);
  // A provider whose newest price is older than 30 days is flagged as stale.
  {
    std::ofstream(catalog_, std::ios::app)
        << "acme,dc1,box8,H100,8,,,16,,instance,hand,2020-01-02,2020-01-02T00:00:00Z\n";
  }
  doctor = run_gpumeter({"doctor"}, env_);
  const auto acme = doctor.out.find("  acme");
  ASSERT_NE(acme, std::string::npos) << doctor.out;
  const std::string line = doctor.out.substr(acme, doctor.out.find('\n', acme) - acme);
  EXPECT_NE(line.find("WARNING: older than 30 days"), std::string::npos) << line;
  EXPECT_NE(doctor.out.find("gpumeter prices update"), std::string::npos) << doctor.out;
}

}  // namespace
}  // namespace gm::test
