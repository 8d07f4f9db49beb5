#include <gtest/gtest.h>

#include "catalog/catalog.h"
#include "support/support.h"

namespace gm {
using test::TempDir;
namespace {

const catalog::Catalog& cat() {
  static const catalog::Catalog c = [] {
    auto r = catalog::Catalog::builtin();
    EXPECT_TRUE(r.ok()) << r.error().message;
    return *r;
  }();
  return c;
}

bool has_flag(const catalog::Offer& o, const std::string& f) {
  return std::find(o.flags.begin(), o.flags.end(), f) != o.flags.end();
}

TEST(CatalogTest, BuiltinLoadsEverySection) {
  EXPECT_GE(cat().gpus().size(), 19u);
  EXPECT_GE(cat().offers().size(), 190u);
  EXPECT_FALSE(cat().billing_rules().empty());
  EXPECT_GE(cat().carbon().size(), 200u);
  EXPECT_FALSE(cat().pue().empty());
  for (const auto& o : cat().offers()) {
    EXPECT_FALSE(o.source.empty()) << o.instance;
    EXPECT_EQ(o.date.size(), 10u) << o.instance;
  }
}

TEST(CatalogTest, NvmlNamesMapToCatalogGpus) {
  const std::pair<const char*, const char*> cases[] = {
      {"NVIDIA H100 80GB HBM3", "H100 SXM 80GB"},  {"NVIDIA H100 PCIe", "H100 PCIe 80GB"},
      {"NVIDIA H100 NVL", "H100 NVL 94GB"},        {"NVIDIA A100-SXM4-40GB", "A100 SXM 40GB"},
      {"NVIDIA A100-SXM4-80GB", "A100 SXM 80GB"},  {"NVIDIA A100 80GB PCIe", "A100 PCIe 80GB"},
      {"NVIDIA L4", "L4 24GB"},                    {"NVIDIA A10G", "A10G 24GB"},
      {"NVIDIA A10", "A10 24GB"},                  {"Tesla T4", "T4 16GB"},
      {"Tesla V100-SXM2-16GB", "V100 SXM 16GB"},   {"NVIDIA H200", "H200 SXM 141GB"},
      {"NVIDIA L40S", "L40S 48GB"},                {"NVIDIA GeForce RTX 4090", "RTX 4090 24GB"},
  };
  for (auto [nvml, id] : cases) {
    const catalog::GpuSpec* g = cat().gpu_for_device_name(nvml);
    ASSERT_NE(g, nullptr) << nvml;
    EXPECT_EQ(g->id, id) << nvml;
  }
  EXPECT_EQ(cat().gpu_for_device_name("Some Future GPU"), nullptr);
}

TEST(CatalogTest, LooseGpuSpellings) {
  EXPECT_EQ(cat().find_gpu("h100")->id, "H100 SXM 80GB");
  EXPECT_EQ(cat().find_gpu("H100-SXM")->id, "H100 SXM 80GB");
  EXPECT_EQ(cat().find_gpu("a100-80gb")->id, "A100 SXM 80GB");
  EXPECT_EQ(cat().find_gpu("A100 PCIe")->id, "A100 PCIe 80GB");
  EXPECT_EQ(cat().find_gpu("l4")->id, "L4 24GB");
  EXPECT_EQ(cat().find_gpu("nonsense"), nullptr);
  EXPECT_NE(cat().suggest_gpu("H10").find("H100"), std::string::npos);
}

TEST(CatalogTest, SanityFlags) {
  bool spot_above = false, gpu_only = false, nd_h100 = false, spot_equal = false;
  for (const auto& o : cat().offers()) {
    if (o.provider == "gcp" && o.instance == "gpu-only-a100-80gbx8" && o.region == "us-central1") {
      EXPECT_TRUE(has_flag(o, "spot_above_ondemand"));
      spot_above = true;
    }
    if (o.instance.rfind("gpu-only-", 0) == 0) {
      EXPECT_TRUE(has_flag(o, "gpu_only_needs_host_vm")) << o.instance;
      gpu_only = true;
    }
    if (o.instance == "Standard_ND96isr_H100_v5") {
      // data/offers.csv has no count for it; the documented instance family (data/instance_gpus.csv) fills
      // it.
      EXPECT_EQ(o.gpu_count, 8);
      EXPECT_FALSE(has_flag(o, "gpu_count_missing"));
      ASSERT_TRUE(o.usd_per_gpu_hour().has_value());
      EXPECT_DOUBLE_EQ(*o.usd_per_gpu_hour(), *o.ondemand_usd_per_hour / 8);
      nd_h100 = true;
    }
    if (o.instance == "Standard_NC40ads_H100_v5") spot_equal = has_flag(o, "spot_equals_ondemand");
  }
  EXPECT_TRUE(spot_above && gpu_only && nd_h100 && spot_equal);
}

TEST(CatalogTest, EveryGpuOfferHasACountAndEveryFamilyRowNamesItsSource) {
  for (const auto& o : cat().offers()) {
    if (has_flag(o, "host_vm_row")) continue;
    EXPECT_GT(o.gpu_count, 0) << o.provider << " " << o.instance;
  }
  for (const auto& f : catalog::instance_gpus_table()) {
    EXPECT_GT(f.gpu_count, 0) << f.instance;
    EXPECT_EQ(f.source.rfind("https://", 0), 0u) << f.instance;
    EXPECT_FALSE(f.gpu.empty()) << f.instance;
  }
  const catalog::InstanceGpus* nd = catalog::find_instance_gpus("azure", "Standard_ND96isr_H100_v5");
  ASSERT_NE(nd, nullptr);
  EXPECT_EQ(nd->gpu, "H100 SXM 80GB");
  EXPECT_EQ(nd->gpu_count, 8);
  EXPECT_EQ(catalog::find_instance_gpus("azure", "Standard_D2s_v3"), nullptr);
}

TEST(CatalogTest, OffersCsvRoundTripsThroughTheLoader) {
  std::vector<catalog::Offer> rows;
  for (const auto& o : cat().offers())
    if (o.provider == "azure") rows.push_back(o);
  rows[0].fetched_at = "2026-11-25T10:00:00Z";
  rows[0].source = "a source, with a comma and \"quotes\"";
  TempDir d;
  const std::string path = d.write("offers.csv", catalog::offers_to_csv(rows));
  auto back = catalog::read_offers_file(path);
  ASSERT_TRUE(back.ok()) << back.error().message;
  ASSERT_EQ(back->size(), rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ((*back)[i].instance, rows[i].instance);
    EXPECT_EQ((*back)[i].gpu_count, rows[i].gpu_count);
    EXPECT_EQ((*back)[i].ondemand_usd_per_hour, rows[i].ondemand_usd_per_hour);
    EXPECT_EQ((*back)[i].spot_usd_per_hour, rows[i].spot_usd_per_hour);
    EXPECT_EQ((*back)[i].source, rows[i].source);
    EXPECT_EQ((*back)[i].fetched_at, rows[i].fetched_at);
  }
}

TEST(CatalogTest, GpuCountMismatchIsFlagged) {
  std::vector<catalog::Offer> offers(1);
  offers[0].provider = "azure";
  offers[0].instance = "Standard_ND96isr_H100_v5";
  offers[0].gpu = "H100 SXM 80GB";
  offers[0].gpu_count = 12;
  offers[0].ondemand_usd_per_hour = 98.32;
  catalog::flag_offers(offers, cat().gpus());
  EXPECT_TRUE(has_flag(offers[0], "gpu_count_mismatch"));
}

TEST(CatalogTest, ReferencePriceIsMedianOfCleanOffers) {
  auto ref = cat().reference_price("H100 SXM 80GB");
  ASSERT_TRUE(ref.has_value());
  std::vector<double> prices;
  for (const auto& o : cat().offers())
    if (o.gpu == "H100 SXM 80GB" && o.flags.empty()) prices.push_back(*o.usd_per_gpu_hour());
  // flagged rows (spot-only flags aside) are excluded; the median lies within the clean prices
  EXPECT_GE(ref->usd_per_gpu_hour, *std::min_element(prices.begin(), prices.end()));
  EXPECT_LE(ref->usd_per_gpu_hour, *std::max_element(prices.begin(), prices.end()));
  EXPECT_GE(ref->offers, prices.size());
}

TEST(CatalogTest, BillingRulesFromData) {
  EXPECT_EQ(cat().billing_rule("aws").granularity_s, 1);
  EXPECT_EQ(cat().billing_rule("aws").minimum_s, 60);
  EXPECT_EQ(cat().billing_rule("gcp").minimum_s, 60);
  EXPECT_EQ(cat().billing_rule("azure").granularity_s, 60);
  EXPECT_EQ(cat().billing_rule("aws").spot_notice_s.value_or(0), 120);
  EXPECT_EQ(cat().billing_rule("unknown-cloud").granularity_s, 1);
}

TEST(CatalogTest, CarbonAndPue) {
  const catalog::CarbonIntensity* c = cat().carbon_for("aws", "us-east-1");
  ASSERT_NE(c, nullptr);
  EXPECT_FALSE(c->dataset.empty());
  EXPECT_GT(c->g_co2e_per_kwh, 0);
  EXPECT_NEAR(cat().pue_for("aws", "us-east-1")->pue, 1.15, 1e-9);
  EXPECT_NEAR(cat().pue_for("aws", "nowhere-1")->pue, 1.135, 1e-9);  // provider average
}

TEST(CatalogTest, OverrideFileMergesAndReportsBadLines) {
  test::TempDir dir;
  catalog::Catalog c = cat();
  const auto good = dir.write("good.csv",
                              "provider,region,instance,gpu,gpu_count,ondemand_usd_per_hour,spot_usd_per_hour,source,date\n"
                              "aws,us-east-1,p5.48xlarge,H100,8,40.00,12,my negotiated rate,2026-11-01\n"
                              "onprem,dc1,rack7,A100-80GB,4,8.0,,finance sheet,2026-10-01\n");
  ASSERT_TRUE(c.merge_offers_file(good).ok());
  const catalog::Offer* p5 = c.find_offer("aws", "p5.48xlarge", "us-east-1");
  ASSERT_NE(p5, nullptr);
  EXPECT_DOUBLE_EQ(*p5->ondemand_usd_per_hour, 40.0);
  EXPECT_TRUE(p5->user_override);
  const catalog::Offer* rack = c.find_offer("onprem", "rack7");
  ASSERT_NE(rack, nullptr);
  EXPECT_EQ(rack->gpu, "A100 SXM 80GB");
  const auto bad = dir.write("bad.csv",
                             "provider,region,instance,gpu,gpu_count,ondemand_usd_per_hour\n"
                             "aws,us-east-1,p5.48xlarge,H100,8,55\n"
                             "aws,us-east-1,p4d.24xlarge,A100,8,abc\n");
  auto r = c.merge_offers_file(bad);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("bad.csv:3"), std::string::npos) << r.error().message;
}

TEST(CatalogDeviceNames, VendorTableIsConsulted) {
  const catalog::GpuSpec* h100 = cat().gpu_for_device_name("NVIDIA H100 80GB HBM3", "nvidia");
  ASSERT_NE(h100, nullptr);
  EXPECT_EQ(h100->id, "H100 SXM 80GB");
  // A name is only matched within its vendor's table; "" searches all of them.
  EXPECT_EQ(cat().gpu_for_device_name("AMD Instinct MI300X", "nvidia"), nullptr);
  ASSERT_NE(cat().gpu_for_device_name("AMD Instinct MI300X", "amd"), nullptr);
  EXPECT_EQ(cat().gpu_for_device_name("AMD Instinct MI300X")->id, "MI300X 192GB");
}

// A shorter model number never prices a longer one: the A100 board of a real trace
// ("NVIDIA A100-PG509-200") was priced as an A10 through the pattern "NVIDIA A10".
TEST(CatalogDeviceNames, ShortModelNumbersDoNotMatchInsideLongerOnes) {
  EXPECT_EQ(cat().gpu_for_device_name("NVIDIA A100-PG509-200", "nvidia")->id, "A100 SXM 40GB");
  EXPECT_EQ(cat().gpu_for_device_name("NVIDIA A100-PG509-210", "nvidia"), nullptr);
  EXPECT_EQ(cat().gpu_for_device_name("NVIDIA L40", "nvidia"), nullptr);
  EXPECT_EQ(cat().gpu_for_device_name("NVIDIA A10", "nvidia")->id, "A10 24GB");
  EXPECT_EQ(cat().gpu_for_device_name("NVIDIA A10G", "nvidia")->id, "A10G 24GB");
  EXPECT_EQ(cat().gpu_for_device_name("NVIDIA L4", "nvidia")->id, "L4 24GB");
  EXPECT_EQ(cat().gpu_for_device_name("NVIDIA L40S", "nvidia")->id, "L40S 48GB");
  EXPECT_EQ(cat().gpu_for_device_name("Tesla V100-PCIE-16GB", "nvidia")->id, "V100 PCIe 16GB");
  EXPECT_EQ(cat().gpu_for_device_name("NVIDIA A100-SXM4-80GB", "nvidia")->id, "A100 SXM 80GB");
}

}  // namespace
}  // namespace gm
