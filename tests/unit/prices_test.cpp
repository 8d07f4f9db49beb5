// The price readers and `prices update` logic over recorded-format answers (tests/data/prices, built from the
// providers' documented formats), served by the fake HTTP client; your own rates ([pricing]).
#include "prices/prices.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "catalog/catalog.h"
#include "meter/meter.h"
#include "prices/detail/readers.h"
#include "support/fake_http.h"
#include "support/support.h"

namespace gm {
namespace {

using prices::detail::parse_decimal_nanos;
using test::read_file;
using test::TempDir;

std::string fixture(const std::string& name) {
  std::string text = read_file(test::source_dir() + "/tests/data/prices/" + name);
  EXPECT_FALSE(text.empty()) << name;
  for (std::size_t at = text.find("{BASE}"); at != std::string::npos; at = text.find("{BASE}"))
    text.replace(at, 6, "http://fake");
  return text;
}

const catalog::Catalog& builtin() {
  static const catalog::Catalog c = [] {
    auto r = catalog::Catalog::builtin();
    EXPECT_TRUE(r.ok());
    return *r;
  }();
  return c;
}

const std::string kAzureEastus =
    "http://fake/api/retail/"
    "prices?$filter=serviceName%20eq%20%27Virtual%20Machines%27%20and%20priceType%20eq%20"
    "%27Consumption%27%20and%20armRegionName%20eq%20%27eastus%27";
const std::string kAwsUsEast1 = "http://fake/offers/v1.0/aws/AmazonEC2/current/us-east-1/index.csv";

void azure_answers(test::FakeHttpClient& fake) {
  fake.answer(kAzureEastus, 200, fixture("azure-eastus-0.json"));
  fake.answer(kAzureEastus + "&$skip=100", 200, fixture("azure-eastus-100.json"));
}

prices::UpdateOptions options_for(prices::Provider p, const std::string& region) {
  prices::UpdateOptions o;
  o.providers = {p};
  o.regions = {region};
  o.endpoint = "http://fake";
  o.now_unix_ms = 1'764'064'800'000;  // 2025-11-25T10:00:00Z
  return o;
}

const prices::OfferOutcome* outcome(const prices::UpdateResult& r, const std::string& instance) {
  for (const auto& o : r.offers)
    if (o.instance == instance) return &o;
  return nullptr;
}

const catalog::Offer* row(const prices::UpdateResult& r, const std::string& region,
                          const std::string& instance) {
  for (const auto& o : r.fetched_catalog)
    if (o.region == region && o.instance == instance) return &o;
  return nullptr;
}

TEST(PricesReaderTest, DecimalPricesAreReadExactlyAsNanoDollars) {
  EXPECT_EQ(parse_decimal_nanos("3.673"), 3'673'000'000);
  EXPECT_EQ(parse_decimal_nanos("55.0400000000"), 55'040'000'000);
  EXPECT_EQ(parse_decimal_nanos("0.0000000000"), 0);
  EXPECT_EQ(parse_decimal_nanos("-1"), -1'000'000'000);
  EXPECT_EQ(parse_decimal_nanos(".5"), 500'000'000);
  EXPECT_EQ(parse_decimal_nanos("0.0000000015"), 2);  // the tenth decimal rounds half up
  for (const char* bad : {"", "abc", "1e3", "NaN", "3.6.7", "-", ".", "1,000", "99999999999999999999"})
    EXPECT_FALSE(parse_decimal_nanos(bad).has_value()) << bad;
}

TEST(PricesReaderTest, AzureRecordedFormatKeepsLinuxConsumptionAndSpotOnly) {
  auto page = prices::detail::read_azure_page(fixture("azure-eastus-0.json"), "page1");
  ASSERT_TRUE(page.ok()) << page.error().message;
  EXPECT_EQ(page->items, 10u);
  // Windows (2), Low Priority, DevTestConsumption, Reservation set aside.
  EXPECT_EQ(page->filtered, 5u);
  ASSERT_TRUE(page->next_link.has_value());
  EXPECT_NE(page->next_link->find("$skip=100"), std::string::npos);
  int linux_nc24 = 0, spot_nc24 = 0;
  for (const auto& p : page->prices) {
    if (p.instance != "Standard_NC24ads_A100_v4") continue;
    if (p.spot) {
      ++spot_nc24;
      EXPECT_EQ(p.nanos, 587'600'000);
    } else {
      ++linux_nc24;
      EXPECT_EQ(p.nanos, 3'520'000'000);
    }
  }
  EXPECT_EQ(linux_nc24, 1);
  EXPECT_EQ(spot_nc24, 1);
  auto last = prices::detail::read_azure_page(fixture("azure-eastus-100.json"), "page2");
  ASSERT_TRUE(last.ok());
  EXPECT_FALSE(last->next_link.has_value());
}

TEST(PricesReaderTest, AzureTruncatedPageIsAnErrorNamingIt) {
  const std::string page = fixture("azure-eastus-0.json");
  auto r = prices::detail::read_azure_page(page.substr(0, page.size() / 2), "azure: page1");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("azure: page1"), std::string::npos);
  EXPECT_NE(r.error().message.find("truncated"), std::string::npos);
  EXPECT_FALSE(prices::detail::read_azure_page(R"({"Count": 0})", "x").ok());
}

std::vector<std::string> aws_rows(const std::string& text, std::size_t chunk) {
  prices::detail::AwsCsvReader reader("aws.csv", "us-east-1");
  for (std::size_t at = 0; at < text.size(); at += chunk) {
    auto r = reader.feed(std::string_view(text).substr(at, chunk));
    EXPECT_TRUE(r.ok()) << r.error().message;
  }
  auto f = reader.finish();
  EXPECT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ(reader.publication_date(), "2026-11-20T18:02:44Z");
  EXPECT_EQ(reader.rows(), 12u);
  std::vector<std::string> out;
  for (const auto& p : reader.prices()) out.push_back(p.instance + "=" + p.text);
  return out;
}

TEST(PricesReaderTest, AwsRecordedFormatKeepsOnDemandLinuxSharedUsedWhateverTheChunking) {
  const std::string csv = fixture("aws-us-east-1.csv");
  const auto whole = aws_rows(csv, csv.size());
  // Windows, RHEL, Reserved, Dedicated, both capacity reservations and SQL Std are set aside.
  const std::vector<std::string> expected = {"p5.48xlarge=31.4640000000", "g6.xlarge=0.8048000000",
                                             "g5.2xlarge=0.0000000000", "m5.large=0.0960000000",
                                             "g7e.2xlarge=1.5500000000"};
  EXPECT_EQ(whole, expected);
  EXPECT_EQ(aws_rows(csv, 1), expected);
  EXPECT_EQ(aws_rows(csv, 7), expected);
}

TEST(PricesReaderTest, AwsTruncatedOrMalformedCsvIsAnError) {
  const std::string csv = fixture("aws-us-east-1.csv");
  for (const std::size_t cut : {csv.size() - 40, csv.size() / 2, std::size_t(30)}) {
    prices::detail::AwsCsvReader reader("aws.csv", "us-east-1");
    auto fed = reader.feed(std::string_view(csv).substr(0, cut));
    if (fed.ok()) fed = reader.finish();
    ASSERT_FALSE(fed.ok()) << cut;
    EXPECT_NE(fed.error().message.find("aws.csv"), std::string::npos);
  }
  prices::detail::AwsCsvReader no_header("aws.csv", "us-east-1");
  ASSERT_TRUE(no_header.feed("\"a\",\"b\"\n").ok());
  EXPECT_FALSE(no_header.finish().ok());
}

TEST(PricesReaderTest, GcpRecordedFormatReadsUnitsAndNanos) {
  auto page = prices::detail::read_gcp_page(fixture("gcp-first.json"), "gcp");
  ASSERT_TRUE(page.ok()) << page.error().message;
  EXPECT_EQ(page->next_page_token, "page-2");
  ASSERT_EQ(page->skus.size(), 4u);
  EXPECT_EQ(page->skus[0].nanos, 4'200'760'000);
  EXPECT_EQ(page->skus[0].usage_type, "OnDemand");
  EXPECT_EQ(page->skus[1].usage_type, "Preemptible");
  EXPECT_EQ(page->skus[0].regions, (std::vector<std::string>{"us-central1", "us-east4"}));
  auto ram = prices::detail::read_gcp_page(fixture("gcp-page-2.json"), "gcp");
  ASSERT_TRUE(ram.ok());
  EXPECT_EQ(ram->skus[1].usage_unit, "GiBy.h");
  EXPECT_EQ(ram->skus[1].nanos, 2'820'000);
}

TEST(PricesReaderTest, LambdaCentsPerHour) {
  auto types = prices::detail::read_lambda_types(fixture("lambda-instance-types.json"), "lambda");
  ASSERT_TRUE(types.ok()) << types.error().message;
  ASSERT_EQ(types->size(), 3u);
  for (const auto& t : *types)
    if (t.name == "gpu_8x_h100_sxm5") {
      EXPECT_EQ(t.nanos, 23'920'000'000);
    }
  EXPECT_FALSE(prices::detail::read_lambda_types("{\"data\": [", "lambda").ok());
}

TEST(PricesUpdateTest, AzureSanityRulesPerOffer) {
  test::FakeHttpClient fake;
  azure_answers(fake);
  prices::HttpGetter http(fake);
  auto r = prices::fetch_update(options_for(prices::Provider::azure, "eastus"), http, builtin(), {});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(fake.urls().size(), 2u);  // followed NextPageLink once
  // Fetched and used, with the documented GPU count.
  const catalog::Offer* nc24 = row(*r, "eastus", "Standard_NC24ads_A100_v4");
  ASSERT_NE(nc24, nullptr);
  EXPECT_EQ(nc24->ondemand_usd_per_hour, 3.52);
  EXPECT_EQ(nc24->spot_usd_per_hour, 0.5876);
  EXPECT_EQ(nc24->date, "2025-11-25");
  EXPECT_EQ(nc24->fetched_at, "2025-11-25T10:00:00Z");
  EXPECT_NE(nc24->source.find("azure-retail-prices"), std::string::npos);
  EXPECT_EQ(outcome(*r, "Standard_NC24ads_A100_v4")->verdict, prices::Verdict::updated);
  const catalog::Offer* nd = row(*r, "eastus", "Standard_ND96isr_H100_v5");
  ASSERT_NE(nd, nullptr);
  EXPECT_EQ(nd->gpu_count, 8);
  EXPECT_EQ(nd->gpu, "H100 SXM 80GB");
  EXPECT_DOUBLE_EQ(*nd->usd_per_gpu_hour(), 98.32 / 8);
  EXPECT_EQ(nd->spot_usd_per_hour, 54.08);
  // $0 and non-numeric prices refused, never written.
  EXPECT_EQ(outcome(*r, "Standard_NC40ads_H100_v5")->verdict, prices::Verdict::refused);
  EXPECT_NE(outcome(*r, "Standard_NC40ads_H100_v5")->detail.find("$0"), std::string::npos);
  EXPECT_EQ(row(*r, "eastus", "Standard_NC40ads_H100_v5"), nullptr);
  EXPECT_EQ(outcome(*r, "Standard_ND96asr_v4")->verdict, prices::Verdict::refused);
  EXPECT_NE(outcome(*r, "Standard_ND96asr_v4")->detail.find("not a number"), std::string::npos);
  // Spot above on-demand: used, flagged.
  EXPECT_EQ(outcome(*r, "Standard_NC48ads_A100_v4")->verdict, prices::Verdict::flagged);
  // Unknown GPU sizes listed, not guessed; non-GPU sizes ignored.
  EXPECT_EQ(r->unknown_instances, (std::vector<std::string>{"azure eastus Standard_NC8ads_A10_v4"}));
  EXPECT_EQ(row(*r, "eastus", "Standard_NC8ads_A10_v4"), nullptr);
  EXPECT_EQ(row(*r, "eastus", "Standard_D2s_v3"), nullptr);
  // The filtered rows' prices appear nowhere.
  for (const auto& o : r->fetched_catalog)
    for (double leaked : {4.4111, 0.9222, 0.3333, 2.2222, 17444.0, 102.7362, 19.6644, 66.6666}) {
      EXPECT_NE(o.ondemand_usd_per_hour, leaked) << o.instance;
      EXPECT_NE(o.spot_usd_per_hour, leaked) << o.instance;
    }
}

TEST(PricesUpdateTest, ChangeOverHalfIsHeldBackUnlessAccepted) {
  test::FakeHttpClient fake;
  azure_answers(fake);
  prices::HttpGetter http(fake);
  // The previous fetch had NC24ads at $1.90: $3.52 is +85 %.
  std::vector<catalog::Offer> previous;
  catalog::Offer o = *builtin().find_offer("azure", "Standard_NC24ads_A100_v4", "eastus");
  o.ondemand_usd_per_hour = 1.90;
  o.fetched_at = "2025-10-01T00:00:00Z";
  o.date = "2025-10-01";
  previous.push_back(o);
  catalog::Catalog current = builtin();
  TempDir d;
  ASSERT_TRUE(current.merge_offers_file(d.write("prev.csv", catalog::offers_to_csv(previous))).ok());
  auto held = prices::fetch_update(options_for(prices::Provider::azure, "eastus"), http, current, previous);
  ASSERT_TRUE(held.ok()) << held.error().message;
  const auto* h = outcome(*held, "Standard_NC24ads_A100_v4");
  EXPECT_EQ(h->verdict, prices::Verdict::held_back);
  EXPECT_NE(h->detail.find("2025-10-01"), std::string::npos) << h->detail;
  EXPECT_EQ(row(*held, "eastus", "Standard_NC24ads_A100_v4")->ondemand_usd_per_hour, 1.90);
  auto opts = options_for(prices::Provider::azure, "eastus");
  opts.accept_changes = true;
  auto accepted = prices::fetch_update(opts, http, current, previous);
  ASSERT_TRUE(accepted.ok());
  EXPECT_EQ(outcome(*accepted, "Standard_NC24ads_A100_v4")->verdict, prices::Verdict::updated);
  EXPECT_EQ(row(*accepted, "eastus", "Standard_NC24ads_A100_v4")->ondemand_usd_per_hour, 3.52);
}

TEST(PricesUpdateTest, FailedFetchIsAnErrorNotAPartialCatalog) {
  test::FakeHttpClient fake;
  prices::HttpGetter http(fake);
  fake.answer(kAzureEastus, 200, fixture("azure-eastus-0.json"));
  // page 2 unreachable
  auto r = prices::fetch_update(options_for(prices::Provider::azure, "eastus"), http, builtin(), {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, ErrorKind::unavailable);
  EXPECT_EQ(r.error().message.rfind("azure: ", 0), 0u) << r.error().message;
  fake.answer(kAzureEastus + "&$skip=100", 500, "oops");
  r = prices::fetch_update(options_for(prices::Provider::azure, "eastus"), http, builtin(), {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("500"), std::string::npos);
}

TEST(PricesUpdateTest, AwsSpotIsKeptFromTheCatalogAndMarked) {
  test::FakeHttpClient fake;
  prices::HttpGetter http(fake);
  fake.answer(kAwsUsEast1, 200, fixture("aws-us-east-1.csv"));
  auto r = prices::fetch_update(options_for(prices::Provider::aws, "us-east-1"), http, builtin(), {});
  ASSERT_TRUE(r.ok()) << r.error().message;
  const catalog::Offer* p5 = row(*r, "us-east-1", "p5.48xlarge");
  ASSERT_NE(p5, nullptr);
  EXPECT_EQ(p5->ondemand_usd_per_hour, 31.464);
  EXPECT_DOUBLE_EQ(*p5->usd_per_gpu_hour(), 31.464 / 8);
  EXPECT_EQ(p5->spot_usd_per_hour,
            builtin().find_offer("aws", "p5.48xlarge", "us-east-1")->spot_usd_per_hour);
  EXPECT_NE(p5->source.find("spot kept from skypilot-catalog"), std::string::npos) << p5->source;
  EXPECT_NE(p5->source.find("Publication Date 2026-11-20T18:02:44Z"), std::string::npos);
  EXPECT_EQ(outcome(*r, "g5.2xlarge")->verdict, prices::Verdict::refused);
  EXPECT_EQ(outcome(*r, "g6.xlarge")->verdict, prices::Verdict::unchanged);
  EXPECT_EQ(r->unknown_instances, (std::vector<std::string>{"aws us-east-1 g7e.2xlarge"}));
  EXPECT_EQ(r->providers[0].rows_read, 12u);
  EXPECT_EQ(r->providers[0].rows_filtered, 7u);
}

TEST(PricesUpdateTest, GcpMachinePriceIsGpusPlusCoresPlusRam) {
  test::FakeHttpClient fake;
  prices::HttpGetter http(fake);
  const std::string base = "http://fake/v1/services/6F81-5844-456A/skus?currencyCode=USD&pageSize=5000";
  fake.answer(base + "&key=k1", 200, fixture("gcp-first.json"));
  fake.answer(base + "&pageToken=page-2&key=k1", 200, fixture("gcp-page-2.json"));
  auto opts = options_for(prices::Provider::gcp, "us-central1");
  auto missing_key = prices::fetch_update(opts, http, builtin(), {});
  ASSERT_FALSE(missing_key.ok());
  EXPECT_EQ(missing_key.error().kind, ErrorKind::usage);
  opts.gcp_api_key = "k1";
  auto r = prices::fetch_update(opts, http, builtin(), {});
  ASSERT_TRUE(r.ok()) << r.error().message;
  const catalog::Offer* one = row(*r, "us-central1", "a3-highgpu-1g");
  ASSERT_NE(one, nullptr);
  // 1 x $4.20076 + 26 x $0.031611 + 234 x $0.00282
  EXPECT_EQ(one->ondemand_usd_per_hour, 5.682526);
  // spot: 1 x $2.5 + 26 x $0.009483 + 234 x $0.000846
  EXPECT_EQ(one->spot_usd_per_hour, 2.944522);
  const catalog::Offer* eight = row(*r, "us-central1", "a3-highgpu-8g");
  ASSERT_NE(eight, nullptr);
  EXPECT_EQ(eight->ondemand_usd_per_hour, 8 * 4.20076 + 208 * 0.031611 + 1872 * 0.00282);
  EXPECT_EQ(r->unknown_instances, (std::vector<std::string>{"gcp us-central1 Nvidia B300 GPU"}));
  for (const auto& u : r->providers[0].requests)
    EXPECT_EQ(u.find("k1"), std::string::npos) << "the key is not reported";
}

TEST(PricesUpdateTest, AtomicWriteReplacesTheWholeFileOrNothing) {
  TempDir d;
  const std::string path = d.path() + "/sub/offers.csv";
  ASSERT_TRUE(prices::write_file_atomically(path, "one\n").ok());
  EXPECT_EQ(read_file(path), "one\n");
  ASSERT_TRUE(prices::write_file_atomically(path, "two\n").ok());
  EXPECT_EQ(read_file(path), "two\n");
  // A directory in the way: an error naming the path, the old file untouched.
  auto bad = prices::write_file_atomically(d.path() + "/sub", "x");
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(read_file(path), "two\n");
}

TEST(ContractRatesTest, DiscountCommittedRateAndOnPremRate) {
  TempDir d;
  const std::string cfg = d.write("config.toml",
                                  "[pricing]\n"
                                  "discount = \"10%\"\n"
                                  "onprem_usd_per_gpu_hour = 1.85\n"
                                  "[pricing.aws]\n"
                                  "discount = \"30%\"\n"
                                  "[pricing.aws.committed]\n"
                                  "\"p5.48xlarge\" = 28.0\n");
  auto rates = meter::load_contract_rates(cfg);
  ASSERT_TRUE(rates.ok()) << rates.error().message;
  const catalog::Offer* p5 = builtin().find_offer("aws", "p5.48xlarge", "us-east-1");
  auto committed = meter::your_price(*p5, false, *rates);
  ASSERT_TRUE(committed.has_value());
  EXPECT_EQ(committed->micros_per_gpu_hour, 3'500'000);  // $28/h over 8 GPUs
  EXPECT_NE(committed->basis.find("committed"), std::string::npos);
  auto spot = meter::your_price(*p5, true,
                                *rates);  // committed rates are on-demand; the aws discount applies to spot
  ASSERT_TRUE(spot.has_value());
  EXPECT_EQ(spot->micros_per_gpu_hour, util::usd_to_micros(*p5->usd_per_gpu_hour(true) * 0.7));
  const catalog::Offer* nc = builtin().find_offer("azure", "Standard_NC24ads_A100_v4", "eastus");
  auto azure = meter::your_price(*nc, false, *rates);  // the "*" discount
  ASSERT_TRUE(azure.has_value());
  EXPECT_EQ(azure->micros_per_gpu_hour, 3'305'700);  // $3.673 x 0.9

  // run/agent price through resolve_price: the offer's quote is your price, the source says both.
  meter::PricingOptions o;
  o.offer = "aws:p5.48xlarge@us-east-1";
  o.config_path = cfg;
  auto q = meter::resolve_price(o, builtin(), std::nullopt, nullptr);
  ASSERT_TRUE(q.ok()) << q.error().message;
  EXPECT_EQ(q->micros_per_gpu_hour, 3'500'000);
  EXPECT_NE(q->source.find("list $6.88/GPU-h"), std::string::npos) << q->source;
  // No offer, no detected instance: the on-premises rate.
  meter::PricingOptions onprem;
  onprem.config_path = cfg;
  auto q2 = meter::resolve_price(onprem, builtin(), std::string("NVIDIA H100 80GB HBM3"), nullptr);
  ASSERT_TRUE(q2.ok());
  EXPECT_EQ(q2->micros_per_gpu_hour, 1'850'000);
  EXPECT_NE(q2->source.find("on-premises"), std::string::npos);
}

TEST(ContractRatesTest, BadRatesNameFileAndKey) {
  TempDir d;
  for (const char* body :
       {"[pricing]\ndiscount = \"130%\"\n", "[pricing]\ndiscount = 30\n",
        "[pricing.aws]\ndiscount = \"100%\"\n", "[pricing.aws.committed]\n\"p5.48xlarge\" = -3\n",
        "[pricing.aws]\nbogus = 1\n", "[pricing]\nonprem_usd_per_gpu_hour = 0\n"}) {
    const std::string cfg = d.write("bad.toml", body);
    auto r = meter::load_contract_rates(cfg);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_EQ(r.error().kind, ErrorKind::usage);
    EXPECT_NE(r.error().message.find("bad.toml: pricing."), std::string::npos) << r.error().message;
  }
}

}  // namespace
}  // namespace gm
